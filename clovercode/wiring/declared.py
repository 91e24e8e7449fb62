"""The parts of a config file that are not settings: MCP servers, hooks and the trusted projects.

They run the user's programs, so a project file (``clovercode.toml``) may declare them only when the
project is trusted (:mod:`clovercode.trust.project`), and never their secrets or approvals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clovercode.ground.errors import ConfigError
from clovercode.hooks.config import EVENTS, HookConfig, parse_hooks
from clovercode.mcpservers.config import ServerConfig, parse_server
from clovercode.trust.project import how_to_trust


@dataclass
class Declared:
    mcp_servers: dict[str, ServerConfig] = field(default_factory=dict)
    hooks: list[HookConfig] = field(default_factory=list)
    trusted_projects: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said once when a session starts
    untrusted: list[str] = field(default_factory=list)  # what an untrusted project declared, ignored ("hooks.stop")

    def hooks_for(self, event: str) -> list[HookConfig]:
        return [h for h in self.hooks if h.event == event]


def take_declarations(declared: Declared, table: dict[str, Any], source: str, project: Path | None,
                      trusted: bool = False, user_file: Path | None = None) -> dict[str, Any]:
    """Move the declarations out of ``table`` into ``declared``; return what is left (settings).
    ``project`` is the project root when ``table`` is that project's file, else None (the user's file);
    ``trusted``: whether that project is trusted; ``user_file`` is named in the note when it is not."""
    table = dict(table)
    servers = table.pop("mcp_servers", {})
    listed = table.pop("trusted_projects", None)
    hooks_table = table.get("hooks")
    hooks: dict[str, Any] = {}
    if isinstance(hooks_table, dict):
        rest = {k: v for k, v in hooks_table.items() if k not in EVENTS and isinstance(v, (bool, int, float, str))}
        hooks = {k: v for k, v in hooks_table.items() if k not in rest}
        table["hooks"] = rest
        if not rest:
            del table["hooks"]
    if listed is not None and project is not None:
        declared.notes.append(f"{source}: ignored trusted_projects (a repository cannot trust itself or others; "
                              "only your user config lists trusted projects)")
    elif listed is not None:
        if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
            raise ConfigError(f"{source}: trusted_projects must be a list of directory paths")
        declared.trusted_projects.extend(listed)
    if not isinstance(servers, dict):
        raise ConfigError(f"{source}: mcp_servers must be a table of servers: [mcp_servers.NAME]")
    if project is not None and (servers or hooks) and not trusted:
        what = " and ".join(w for w, present in (("MCP servers", servers), ("hooks", hooks)) if present)
        declared.untrusted += [f"mcp_servers.{name}" for name in servers] + [f"hooks.{event}" for event in hooks]
        declared.notes.append(f"{source} declares {what}; they are ignored because this project is not trusted "
                              f"(to allow them, {how_to_trust(project, user_file or Path('your user config'))})")
        return table
    for name, entry in servers.items():
        server = parse_server(name, entry, source, from_project=project is not None)
        if name in declared.mcp_servers and project is not None:
            declared.notes.append(f"{source}: MCP server '{name}' is also in your user config; yours is used")
            continue
        declared.mcp_servers[name] = server
    for event, entries in hooks.items():
        declared.hooks.extend(parse_hooks(event, entries, source, from_project=project is not None))
    return table

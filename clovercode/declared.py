"""The parts of a config file that are not settings: MCP servers, hooks and the trusted projects.

They run the user's programs, so a project file (``clovercode.toml``) may declare them only when the
user's own config lists the project in ``trusted_projects``, and never their secrets or approvals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clovercode.errors import ConfigError
from clovercode.hooks.config import EVENTS, HookConfig, parse_hooks
from clovercode.mcpservers.config import ServerConfig, parse_server


@dataclass
class Declared:
    mcp_servers: dict[str, ServerConfig] = field(default_factory=dict)
    hooks: list[HookConfig] = field(default_factory=list)
    trusted_projects: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said once when a session starts

    def hooks_for(self, event: str) -> list[HookConfig]:
        return [h for h in self.hooks if h.event == event]

    def is_trusted(self, project: Path) -> bool:
        here = project.resolve()
        return any(Path(p).expanduser().resolve() == here for p in self.trusted_projects)


def take_declarations(declared: Declared, table: dict[str, Any], source: str, project: Path | None) -> dict[str, Any]:
    """Move the declarations out of ``table`` into ``declared``; return what is left (settings).
    ``project`` is the project root when ``table`` is that project's file, else None (the user's file)."""
    table = dict(table)
    servers = table.pop("mcp_servers", {})
    trusted = table.pop("trusted_projects", None)
    hooks_table = table.get("hooks")
    hooks: dict[str, Any] = {}
    if isinstance(hooks_table, dict):
        rest = {k: v for k, v in hooks_table.items() if k not in EVENTS and isinstance(v, (bool, int, float, str))}
        hooks = {k: v for k, v in hooks_table.items() if k not in rest}
        table["hooks"] = rest
        if not rest:
            del table["hooks"]
    if trusted is not None:
        if project is not None:
            raise ConfigError(f"{source}: 'trusted_projects' is not allowed in a project file",
                              hint="A repository cannot trust itself; list it in your user config.")
        if not isinstance(trusted, list) or not all(isinstance(p, str) for p in trusted):
            raise ConfigError(f"{source}: trusted_projects must be a list of directory paths")
        declared.trusted_projects.extend(trusted)
    if not isinstance(servers, dict):
        raise ConfigError(f"{source}: mcp_servers must be a table of servers: [mcp_servers.NAME]")
    if project is not None and (servers or hooks) and not declared.is_trusted(project):
        what = " and ".join(w for w, present in (("MCP servers", servers), ("hooks", hooks)) if present)
        declared.notes.append(f"{source} declares {what}; they are ignored because this project is not trusted "
                              f"(add \"{project}\" to trusted_projects in your user config to allow them)")
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

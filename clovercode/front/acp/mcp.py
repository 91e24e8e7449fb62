"""The client's ``mcpServers`` joined to the user's, under the project's trust.

An editor passes the MCP servers of its settings, and editors read settings from the project too
(Zed's ``.zed/settings.json``): a cloned repository could name a program here. So the client's
servers follow the rule of a project file's servers (trust/project.py): in an untrusted project they
do not start, and a note says how to trust it; in a trusted one they join the user's servers, and a
server of the user's config with the same name wins. Their env and headers are allowed (the editor
holds the user's secrets); auto-approval never comes from the client.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from clovercode.ground.config import Config, user_config_path
from clovercode.ground.errors import ConfigError
from clovercode.mcpservers.config import parse_server
from clovercode.trust.project import how_to_trust

SOURCE = "the editor (session/new mcpServers)"


def client_table(server: Any) -> dict[str, Any] | None:
    """An ACP McpServer as an ``[mcp_servers.NAME]`` table, or None for a transport clovercode lacks (SSE)."""
    kind = getattr(server, "type", None)
    if kind == "http":
        table: dict[str, Any] = {"url": server.url}
        if server.headers:
            table["headers"] = {h.name: h.value for h in server.headers}
        return table
    if kind is None and getattr(server, "command", None) is not None:  # stdio has no "type"
        table = {"command": server.command, "args": list(server.args)}
        if server.env:
            table["env"] = {e.name: e.value for e in server.env}
        return table
    return None


def join_client_servers(cfg: Config, servers: list[Any], root: Path, env: dict[str, str]) -> Config:
    """``cfg`` with the client's servers added where trust allows, and a note for each one left out."""
    if not servers:
        return cfg
    notes: list[str] = []
    joined = dict(cfg.declared.mcp_servers)
    names = ", ".join(getattr(s, "name", "?") for s in servers)
    if not cfg.project_trusted:
        notes.append(f"the editor's MCP servers ({names}) did not start because this project is not trusted "
                     f"(to allow them, {how_to_trust(root, user_config_path(env))})")
    else:
        for server in servers:
            table = client_table(server)
            if table is None:
                notes.append(f"the editor's MCP server '{server.name}' uses SSE, which clovercode does not speak "
                             "(use stdio or streamable HTTP)")
                continue
            if server.name in joined:
                notes.append(f"the editor's MCP server '{server.name}' is also in your config; yours is used")
                continue
            try:
                joined[server.name] = parse_server(server.name, table, SOURCE, from_project=False)
            except ConfigError as exc:
                notes.append(f"the editor's MCP server '{server.name}' was not started: {exc.message}")
    declared = dataclasses.replace(cfg.declared, mcp_servers=joined, notes=[*cfg.declared.notes, *notes])
    return dataclasses.replace(cfg, declared=declared)

"""Bodies of ``clovercode mcp list`` and ``clovercode mcp check NAME`` (registered in cli.py)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Mapping

from rich.console import Console
from rich.markup import escape

from clovercode.ground.config import Config, state_dir
from clovercode.ground.errors import UsageError
from clovercode.mcpservers.config import ServerConfig
from clovercode.mcpservers.manager import McpManager
from clovercode.toolcalls.schemas import ToolSpec, signature
from clovercode.trust.terminal import inert

STATUS_STYLE = {"running": "green", "disabled": "dim", "failed": "red", "crashed": "red"}


def open_manager(root: Path, cfg: Config, servers: list[ServerConfig], env: Mapping[str, str]) -> McpManager:
    return McpManager(servers, root, env, state_dir(env) / "mcp-logs", cfg["output_limit"])


def run_list(root: Path, cfg: Config, console: Console, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    for note in cfg.declared.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    servers = list(cfg.declared.mcp_servers.values())
    if not servers:
        console.print("No MCP servers are configured. Add [mcp_servers.NAME] to your config (docs/mcp-and-hooks.md).",
                      highlight=False, markup=False)
        return 0
    manager = open_manager(root, cfg, servers, env)
    try:
        warnings = manager.start()
        _print_rows(console, manager)
    finally:
        manager.close()
    _print_warnings(console, warnings)
    return 0


def run_check(root: Path, cfg: Config, name: str, console: Console, env: Mapping[str, str] | None = None) -> int:
    """Start one server (also a disabled one), list its tools; exit 1 when it does not work."""
    env = os.environ if env is None else env
    server = cfg.declared.mcp_servers.get(name)
    if server is None:
        known = ", ".join(sorted(cfg.declared.mcp_servers)) or "none"
        raise UsageError(f"no MCP server named '{name}' is configured (configured: {known})",
                         hint="Servers are [mcp_servers.NAME] tables in your config (docs/mcp-and-hooks.md).")
    manager = open_manager(root, cfg, [dataclasses.replace(server, enabled=True)], env)
    try:
        warnings = manager.start()
        _print_rows(console, manager, details=True)
        ok = manager.connections[name].status == "running"
    finally:
        manager.close()
    _print_warnings(console, warnings)
    console.print(f"[green]ok[/]: {escape(name)} works" if ok else f"[red]failed[/]: {escape(name)} does not work",
                  highlight=False)
    return 0 if ok else 1


def mcp_specs(root: Path, cfg: Config, env: Mapping[str, str] | None = None) -> tuple[list[ToolSpec], list[str]]:
    """The tool specs of every enabled server (started and stopped again), and the warnings."""
    servers = list(cfg.declared.mcp_servers.values())
    if not servers:
        return [], list(cfg.declared.notes)
    manager = open_manager(root, cfg, servers, os.environ if env is None else env)
    try:
        warnings = manager.start()
        return [spec for spec, _ in manager.tools()], list(cfg.declared.notes) + warnings
    finally:
        manager.close()


def print_rows(console: Console, manager: McpManager, details: bool = False, *, tools_shown: bool = True,
               only: str | None = None) -> None:
    """Each server: status, transport, where it is configured; its error (``details``) and tools.
    What a server says (errors, stderr, descriptions) is drawn inert: it is not ours."""
    for config, status, error, tools in manager.status_rows():
        if only is not None and config.name != only:
            continue
        style = STATUS_STYLE.get(status, "yellow")
        count = f" · {len(tools)} tool{'' if len(tools) == 1 else 's'}" if status == "running" else ""
        console.print(f"[bold]{escape(config.name)}[/]  [{style}]{status}[/]{count}  [dim]{config.transport}: "
                      f"{escape(config.describe())} · {escape(config.source)}[/]", highlight=False, soft_wrap=True)
        if error and details:
            console.print(f"    [red]{escape(inert(error))}[/]", highlight=False, soft_wrap=True)
        for tool in tools if tools_shown else []:
            console.print(f"    [cyan]{escape(tool.spec.name)}[/]  {escape(inert(tool.spec.description))}", highlight=False,
                          soft_wrap=True)
            if details:
                console.print(f"        [dim]{escape(inert(signature(tool.spec)))}[/]", highlight=False, soft_wrap=True)


_print_rows = print_rows


def _print_warnings(console: Console, warnings: list[str]) -> None:
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)

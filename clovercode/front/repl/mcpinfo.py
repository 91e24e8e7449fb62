"""``/mcp`` and the MCP and hook rows of ``/status``: what the session's MCP servers are doing now
(they start in the background, so a server may still be starting) and which hooks are in force."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from clovercode.trust.terminal import inert

if TYPE_CHECKING:
    from clovercode.front.repl.app import Repl

USAGE = "/mcp shows the servers; /mcp tools (or /mcp NAME) also their tools and errors"


def servers_line(repl: "Repl") -> str | None:
    """One line for /status: each server, its state and tool count; None when none is configured."""
    manager = repl.session.mcp
    if manager is None:
        return None
    parts = []
    for config, status, _, tools in manager.status_rows():
        count = f", {len(tools)} tool{'' if len(tools) == 1 else 's'}" if status == "running" else ""
        parts.append(f"{config.name} ({status}{count})")
    return " · ".join(parts) + " (/mcp)"


def hooks_line(repl: "Repl") -> str | None:
    """One line for /status: how many hooks of each event are in force."""
    hooks = list(repl.cfg.declared.hooks)
    if not hooks:
        return None
    counts: dict[str, int] = {}
    for hook in hooks:
        counts[hook.event] = counts.get(hook.event, 0) + 1
    return " · ".join(f"{event} ×{n}" for event, n in counts.items())


def mcp_command(repl: "Repl", arg: str) -> bool:
    from clovercode.mcpservers.command import print_rows

    console, manager, arg = repl.console, repl.session.mcp, arg.strip()
    if manager is None:
        console.print("No MCP servers are configured. Add [mcp_servers.NAME] to your config (docs/mcp-and-hooks.md).",
                      highlight=False, markup=False)
        return True
    if arg and arg != "tools" and arg not in manager.configs:
        console.print(f"no MCP server named '{escape(inert(arg, newlines=False))}' · {USAGE}", highlight=False)
        return True
    print_rows(console, manager, details=bool(arg), tools_shown=bool(arg), only=None if arg in ("", "tools") else arg)
    if manager.starting:
        console.print(f"[dim]still starting: {escape(', '.join(manager.starting))}; their tools join the model's "
                      "tools when they are ready[/]", highlight=False)
    if not arg:
        console.print(f"[dim]{USAGE}[/]", highlight=False)
    return True

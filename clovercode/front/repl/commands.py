"""The REPL's slash commands. Each body is small or lives in the module that owns the subject."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from rich.markup import escape

from clovercode.ground.errors import CloverError

if TYPE_CHECKING:
    from clovercode.front.repl.app import Repl


@dataclass(frozen=True)
class SlashCommand:
    name: str
    help: str
    run: Callable[["Repl", str], bool]  # returns False to leave the REPL
    usage: str = ""  # e.g. "[N]"


def print_error(console, exc: CloverError) -> None:  # type: ignore[no-untyped-def]
    # Escaped: messages quote paths and specs the user typed, and rich reads "[...]" as markup.
    console.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)


def _help(repl: "Repl", _: str) -> bool:
    labels = {c.name: f"/{c.name}" + (f" {c.usage}" if c.usage else "") for c in repl.commands.values()}
    width = max(len(label) for label in labels.values())
    for command in repl.commands.values():
        repl.console.print(f"  [bold]{escape(labels[command.name].ljust(width))}[/]  {escape(command.help)}", highlight=False)
    if repl.custom:
        repl.console.print("custom commands:", highlight=False)
        custom_width = max(len(name) + 1 for name in repl.custom)
        for command in repl.custom.values():
            label = f"/{command.name}".ljust(max(width, custom_width))
            repl.console.print(f"  [bold]{escape(label)}[/]  {escape(command.description)} [dim]({command.source}: "
                               f"{escape(str(command.path))})[/]", highlight=False, soft_wrap=True)
    repl.console.print(f"  [bold]{'@path'.ljust(width)}[/]  attach a file (Tab completes)\n"
                       f"  [bold]{'!command'.ljust(width)}[/]  run a command in the sandbox; its output joins the conversation",
                       highlight=False)
    return True


def _tools(repl: "Repl", _: str) -> bool:
    from clovercode.toolcalls.schemas import load_tool_specs, signature

    mcp = repl.session.mcp
    for spec in load_tool_specs() + ([s for s, _ in mcp.tools()] if mcp else []):
        repl.console.print(f"  [bold cyan]{escape(spec.name)}[/] {escape(signature(spec))}", highlight=False)
        if mcp and "__" in spec.name:  # an MCP tool: the model's only guide to it is its description
            repl.console.print(f"      [dim]{escape(spec.description)}[/]", highlight=False)
    return True


def _agents(repl: "Repl", _: str) -> bool:
    from clovercode.subagents.wiring import session_agents
    from clovercode.trust.terminal import inert

    session = repl.session
    if not session.cfg["subagents.enabled"]:
        repl.console.print("subagents are off (subagents.enabled = false)", highlight=False, markup=False)
        return True
    notes: list[tuple[str, str]] = []
    session.agents = session_agents(session.root, session.cfg, session.env, notes)  # re-read: files may have changed
    repl.console.print("  [bold cyan]general[/] [dim](built in)[/] reads, searches and runs read-only commands; "
                       "the model starts it with the task tool", highlight=False)
    for profile in session.agents.values():
        tools = ", ".join(profile.tools) if profile.tools is not None else "read-only tools"
        repl.console.print(f"  [bold cyan]{escape(inert(profile.name))}[/] [dim]({profile.source}: {escape(str(profile.path))})[/] "
                           f"{escape(inert(profile.description))} [dim]· {escape(inert(tools))}[/]", highlight=False, soft_wrap=True)
    for _, note in notes:
        repl.console.print(f"  [yellow]⚠ {escape(inert(note))}[/]", highlight=False)
    return True


def _model(repl: "Repl", arg: str) -> bool:
    if not arg:
        repl.console.print(f"model: {repl.session.backend.name}", highlight=False, markup=False)
        return True
    from clovercode.backends.registry import open_backend

    try:
        backend = open_backend(repl.cfg.with_overrides({"model": arg}, "/model"), base_dir=repl.root)
    except CloverError as exc:
        print_error(repl.console, exc)
        return True
    repl.session.backend.close()
    repl.session.backend = backend
    repl.console.print(f"model: {backend.name}", highlight=False, markup=False)
    return True


def _clear(repl: "Repl", _: str) -> bool:
    repl.session.conversation.clear()
    repl.session.stamps.clear()  # the model no longer remembers what it viewed
    repl.session.prompt = None  # a fresh prompt: nothing compacted, no old repo-map focus
    repl.transcript.clear()
    repl.console.print("conversation cleared", highlight=False)
    return True


def _undo(repl: "Repl", _: str, redoing: bool = False) -> bool:
    from clovercode.front.undocmd import run_undo

    try:
        run_undo(repl.root, repl.console, redoing=redoing)
    except CloverError as exc:
        repl.console.print(escape(str(exc)), highlight=False)
    return True


def _redo(repl: "Repl", arg: str) -> bool:
    return _undo(repl, arg, redoing=True)


def _exit(repl: "Repl", _: str) -> bool:
    return False


def _compact(repl: "Repl", arg: str) -> bool:
    from clovercode.front.contextcmd import compact_command

    return compact_command(repl, arg)


def _context(repl: "Repl", arg: str) -> bool:
    from clovercode.front.contextcmd import context_command

    return context_command(repl, arg)


def _show(repl: "Repl", arg: str) -> bool:
    from clovercode.front.repl.transcript import show_command

    show_command(repl.console, repl.transcript, arg)
    return True


def _transcript(repl: "Repl", _: str) -> bool:
    from clovercode.front.repl.transcript import transcript_command

    transcript_command(repl.console, repl.transcript)
    return True


def _said(repl: "Repl", command: Callable[["Repl", str], bool], arg: str) -> bool:
    """A slash command whose user mistakes (CloverError) are said at the prompt, never a traceback."""
    try:
        return command(repl, arg)
    except CloverError as exc:
        print_error(repl.console, exc)
        return True


def _permissions(repl: "Repl", arg: str) -> bool:
    from clovercode.front.repl.permissions import permissions_command

    return _said(repl, permissions_command, arg)


def _mcp(repl: "Repl", arg: str) -> bool:
    from clovercode.front.repl.mcpinfo import mcp_command

    return mcp_command(repl, arg)


def _cost(repl: "Repl", arg: str) -> bool:
    from clovercode.front.repl.cost import cost_command

    return cost_command(repl, arg)


def _plan(repl: "Repl", arg: str) -> bool:
    from clovercode.front.repl.modes import plan_command

    return plan_command(repl, arg)


def _fix(repl: "Repl", arg: str) -> bool:
    from clovercode.front.repl.fixslash import fix_command

    return _said(repl, fix_command, arg)


def _info(name: str) -> Callable[["Repl", str], bool]:
    def run(repl: "Repl", arg: str) -> bool:
        from clovercode.front.repl import info

        return getattr(info, f"{name}_command")(repl, arg)

    return run


def default_commands() -> list[SlashCommand]:
    return [
        SlashCommand("help", "show these commands", _help),
        SlashCommand("tools", "list the tools the model can call", _tools),
        SlashCommand("agents", "the subagents the model can start (yours, and a trusted project's)", _agents),
        SlashCommand("model", "show the model, or switch to SPEC", _model, "[SPEC]"),
        SlashCommand("clear", "forget the conversation so far", _clear),
        SlashCommand("show", "show observation N in full (default: the last)", _show, "[N]"),
        SlashCommand("transcript", "the whole session, nothing cut", _transcript),
        SlashCommand("undo", "restore the files as they were before the last change", _undo),
        SlashCommand("redo", "take the last /undo back", _redo),
        SlashCommand("compact", "summarise the history now, keeping the goal, plan and edited files", _compact),
        SlashCommand("context", "show how full the context window is", _context),
        SlashCommand("cost", "tokens and time this session, split between the model and the tools", _cost),
        SlashCommand("plan", "plan mode: read only until you approve a plan; with TASK, plan it now", _plan, "[TASK]"),
        SlashCommand("fix", "fix an issue as `clovercode fix` does (a branch, the tests, one commit); "
                     "--attempts N runs N side by side, a row each", _fix, "[--attempts N] [--first] ISSUE"),
        SlashCommand("permissions", "list the command allow rules, or remove one", _permissions, "[remove N]"),
        SlashCommand("diff", "what this session changed in the files", _info("diff")),
        SlashCommand("status", "model, sandbox, approvals, session, usage, context, MCP servers, hooks", _info("status")),
        SlashCommand("mcp", "MCP servers: state and tool count; with tools or NAME, their tools", _mcp, "[tools|NAME]"),
        SlashCommand("sessions", "this project's saved sessions (continue one with --resume ID)", _info("sessions")),
        SlashCommand("init", "write a starter AGENTS.md for this project", _info("init"), "[--force]"),
        SlashCommand("exit", "leave (Ctrl-D works too)", _exit),
        SlashCommand("quit", "leave", _exit),
    ]

"""The interactive REPL: prompt-toolkit input, rich output, slash commands, Ctrl-C per step."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from rich.console import Console
from rich.markup import escape

from clovercode.config import Config, state_dir
from clovercode.errors import CloverError, ConfigError
from clovercode.executors.select import NO_SANDBOX_WARNING
from clovercode.session import Session, open_session
from clovercode.taskinput import check_task
from clovercode.termination import Terminated
from clovercode.ui.render import ConsoleRenderer

BANNER = "clovercode {version} · {root}\nType a task, /help for commands. Alt-Enter (or Esc Enter) inserts a newline; Ctrl-D exits."


@dataclass(frozen=True)
class SlashCommand:
    name: str
    help: str
    run: Callable[["Repl", str], bool]  # returns False to leave the REPL


class Repl:
    def __init__(self, root: Path, cfg: Config, console: Console, session: Session):
        self.root, self.cfg, self.console, self.session = root, cfg, console, session
        self.commands = {c.name: c for c in default_commands()}

    def handle(self, line: str) -> bool:
        """Process one input; return False when the REPL should exit."""
        text = line.strip()
        if not text:
            return True
        if text.startswith("/"):
            name, _, rest = text[1:].partition(" ")
            command = self.commands.get(name)
            if command is None:
                self.console.print(f"[yellow]unknown command /{escape(name)}[/]; /help lists them", highlight=False)
                return True
            return command.run(self, rest.strip())
        try:
            check_task(text)  # the same size rule as fix and exec (taskinput.py)
            result = self.session.run_task(text, ConsoleRenderer(self.console))
        except CloverError as exc:  # e.g. the sandbox stopped working: say so, keep the REPL
            print_error(self.console, exc)
            return True
        if result.signal is not None:  # SIGTERM/SIGHUP stopped the task: the REPL ends too
            raise Terminated(result.signal)
        if result.summary and result.stop.value in ("finished", "answered"):
            self.console.print(result.summary, highlight=False, markup=False)
        from clovercode.context.commands import context_line

        status = context_line(self.session)
        if status:
            self.console.print(status, style="dim", highlight=False, markup=False, soft_wrap=True)
        return True


def print_error(console: Console, exc: CloverError) -> None:
    # Escaped: messages quote paths and specs the user typed, and rich reads "[...]" as markup.
    console.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)


def _help(repl: Repl, _: str) -> bool:
    for command in repl.commands.values():
        repl.console.print(f"  [bold]/{command.name}[/]  {command.help}", highlight=False)
    return True


def _tools(repl: Repl, _: str) -> bool:
    from clovercode.toolcalls.schemas import load_tool_specs, signature

    mcp = repl.session.mcp
    for spec in load_tool_specs() + ([s for s, _ in mcp.tools()] if mcp else []):
        repl.console.print(f"  [bold cyan]{escape(spec.name)}[/] {escape(signature(spec))}", highlight=False)
        if mcp and "__" in spec.name:  # an MCP tool: the model's only guide to it is its description
            repl.console.print(f"      [dim]{escape(spec.description)}[/]", highlight=False)
    return True


def _model(repl: Repl, arg: str) -> bool:
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


def _clear(repl: Repl, _: str) -> bool:
    repl.session.conversation.clear()
    repl.session.stamps.clear()  # the model no longer remembers what it viewed
    repl.console.print("conversation cleared", highlight=False)
    return True


def _undo(repl: Repl, _: str, redoing: bool = False) -> bool:
    from clovercode.undocmd import run_undo

    try:
        run_undo(repl.root, repl.console, redoing=redoing)
    except CloverError as exc:
        repl.console.print(escape(str(exc)), highlight=False)
    return True


def _redo(repl: Repl, arg: str) -> bool:
    return _undo(repl, arg, redoing=True)


def _exit(repl: Repl, _: str) -> bool:
    return False


def _compact(repl: Repl, arg: str) -> bool:
    from clovercode.context.commands import compact_command

    return compact_command(repl, arg)


def _context(repl: Repl, arg: str) -> bool:
    from clovercode.context.commands import context_command

    return context_command(repl, arg)


def default_commands() -> list[SlashCommand]:
    return [
        SlashCommand("help", "show these commands", _help),
        SlashCommand("tools", "list the tools the model can call", _tools),
        SlashCommand("model", "show the model, or switch: /model SPEC", _model),
        SlashCommand("clear", "forget the conversation so far", _clear),
        SlashCommand("undo", "restore the files as they were before the last change", _undo),
        SlashCommand("redo", "take the last /undo back", _redo),
        SlashCommand("compact", "summarise the history now, keeping the goal, plan and edited files", _compact),
        SlashCommand("context", "show how full the context window is", _context),
        SlashCommand("exit", "leave (Ctrl-D works too)", _exit),
        SlashCommand("quit", "leave", _exit),
    ]


def history_path(cfg: Config) -> Path:
    """The REPL's input history file, checked writable (prompt-toolkit appends to it after every line)."""
    path = Path(cfg["history_file"]).expanduser() if cfg["history_file"] else state_dir(os.environ) / "history"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.open("a", encoding="utf-8").close()
    except OSError as exc:
        raise ConfigError(f"cannot write the REPL history {path}: {exc.strerror or exc}",
                          hint="Set history_file (CLOVERCODE_HISTORY_FILE) to a writable file.") from None
    return path


def _tty_lines(cfg: Config) -> Iterator[str]:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings

    bindings = KeyBindings()

    @bindings.add("escape", "enter")
    def _newline(event) -> None:  # Alt-Enter / Esc Enter: a newline instead of submitting
        event.current_buffer.insert_text("\n")

    prompt = PromptSession(history=FileHistory(str(history_path(cfg))), key_bindings=bindings, multiline=False)
    while True:
        try:
            yield prompt.prompt("clover> ")
        except Terminated:
            raise
        except KeyboardInterrupt:  # Ctrl-C at the prompt clears the line, it does not exit
            continue
        except EOFError:
            return


def _plain_lines() -> Iterator[str]:
    for line in sys.stdin:
        yield line.rstrip("\n")


def run_repl(root: Path, cfg: Config, console: Console, resume: str | None = None) -> int:
    from clovercode.actions.approval import ModeApprover
    from clovercode.ui.approval_prompt import make_ask, plain_read_line, tty_read_line

    tty = sys.stdin.isatty() and sys.stdout.isatty()
    approver = ModeApprover(cfg["approval"], cfg["sandbox"] != "none",
                            make_ask(console, tty_read_line if tty else plain_read_line))
    session = open_session(root, cfg, interactive=True, approve=approver)
    from clovercode import __version__

    console.print(BANNER.format(version=__version__, root=root), highlight=False, markup=False)
    if cfg["sandbox"] == "none":
        console.print(f"[bold red]{NO_SANDBOX_WARNING}[/]", highlight=False)
    console.print(f"sandbox: {cfg['sandbox']} · approval: {cfg['approval']}", highlight=False, markup=False)
    if approver.notice():
        console.print(f"[yellow]{escape(approver.notice() or '')}[/]", highlight=False)
    for notice in session.take_notices():  # MCP servers that did not start, untrusted project hooks
        console.print(f"[yellow]⚠ {escape(notice)}[/]", highlight=False, soft_wrap=True)
    if resume is not None:
        from clovercode.context.commands import resume_into

        try:
            resume_into(session, resume, console)
        except BaseException:
            session.close()
            raise
    repl = Repl(root, cfg, console, session)
    lines = _tty_lines(cfg) if tty else _plain_lines()
    try:
        for line in lines:
            try:
                if not repl.handle(line):
                    break
            except Terminated:
                raise
            except KeyboardInterrupt:
                console.print("[yellow]interrupted[/]")
    finally:
        session.close()
    return 0

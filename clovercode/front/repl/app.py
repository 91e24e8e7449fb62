"""The REPL loop: read a line, run a slash command or a task, show the run once."""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, ContextManager, Iterator

from rich.console import Console
from rich.markup import escape

from clovercode.actions.approval import NO, PLAN, ModeApprover
from clovercode.agent.planmode import plan_task
from clovercode.agent.events import MultiSink
from clovercode.ground.config import Config
from clovercode.ground.errors import CloverError
from clovercode.executors.select import NO_SANDBOX_WARNING
from clovercode.front.repl.commands import default_commands, print_error
from clovercode.front.repl.transcript import Transcript
from clovercode.wiring.session import Session, open_session
from clovercode.ground.taskinput import check_task
from clovercode.ground.termination import Terminated
from clovercode.trust.terminal import inert
from clovercode.ui.live import CTRL_C_HINT, ESC_HINT, LiveStatus, StepStatus, command_label
from clovercode.ui.render import ConsoleRenderer, Screen, print_markdown

BANNER = "clovercode {version} · {root}\nType a task, /help for commands. Alt-Enter (or Esc Enter) inserts a newline; Ctrl-D exits."


class Repl:
    def __init__(self, root: Path, cfg: Config, console: Console, session: Session, screen: Screen | None = None,
                 approver: ModeApprover | None = None):
        self.root, self.cfg, self.console, self.session = root, cfg, console, session
        self.approver = approver or ModeApprover(cfg["approval"], cfg["sandbox"] != "none", lambda r: NO)
        self.commands = {c.name: c for c in default_commands()}
        from clovercode.front.repl.custom import load_custom_commands

        notes: list[str] = []
        self.custom = load_custom_commands(root, session.env, set(self.commands), notes)
        for note in notes:
            console.print(f"[yellow]⚠ {escape(note)}[/]", highlight=False, soft_wrap=True)
        self.first_snapshot = None  # the checkpoint before this session's first change (/diff)
        self.changed: set[str] = set()
        self.tasks = self.steps = self.prompt_tokens = self.completion_tokens = 0
        self.transcript = Transcript()
        self.screen = screen or Screen()
        if self.screen.live is None:
            self.screen.live = LiveStatus(console)
        self.screen.observation_count = self.transcript.observation_count
        from clovercode.front.repl.modes import Modes

        self.modes = Modes(self.approver)
        from clovercode.front.repl.cost import CostMeter

        self.cost = CostMeter()
        # One answer among letters (None: Esc), and a line: the terminal's or piped input (run_repl sets them).
        self.choose: Callable[[str, str], str | None] = lambda question, keys: None
        self.read_line: Callable[..., str | None] = lambda prompt, fresh=False: None

    def handle(self, line: str) -> bool:
        """Process one input; return False when the REPL should exit."""
        text = line.strip()
        if not text:
            return True
        if text.startswith("/"):
            name, _, rest = text[1:].partition(" ")
            command = self.commands.get(name)
            if command is None and name in self.custom:
                self.run_task(self.custom[name].task(rest.strip()))
                return True
            if command is None:
                self.console.print(f"[yellow]unknown command /{escape(name)}[/]; /help lists them", highlight=False)
                return True
            return command.run(self, rest.strip())
        if text.startswith("!"):
            self.shell(text[1:].strip())
            return True
        self.run_task(text)
        return True

    def shell(self, command: str) -> None:
        from clovercode.front.repl.attach import run_shell

        if not command:
            self.console.print("!command runs a command in the sandbox, e.g. !ls", highlight=False)
            return
        self.transcript.add_user(command, "shell")
        self.console.print(f"[dim]$ {escape(inert(command))}  (sandbox: {escape(self.session.executor.name)})[/]", highlight=False)
        live = self.screen.live
        assert live is not None
        try:
            with self.turn():
                live.start(StepStatus(command_label(command)))
                output, ok = run_shell(self.session, command)
        finally:
            live.stop()
        self.console.print(inert(output), style=None if ok else "red", highlight=False, markup=False, soft_wrap=True)
        self.console.print("[dim]the output is in the conversation: the next task can refer to it[/]", highlight=False)

    def with_attachments(self, text: str) -> str:
        from clovercode.front.repl.attach import attach_budget, expand_mentions

        if "@" not in text:
            return text
        expanded = expand_mentions(text, self.root, attach_budget(self.session), self.session.stamps)
        for item in expanded.attached:
            cut = f", cut to {item.kept} lines to fit the budget" if item.kept < item.lines else ""
            self.console.print(f"[dim]attached {escape(item.shown)} ({item.lines} lines, ~{item.tokens} tokens{cut})[/]",
                               highlight=False)
        for problem in expanded.problems:
            self.console.print(f"[yellow]not attached[/] {escape(problem)}", highlight=False, soft_wrap=True)
        return expanded.text

    def context_share(self) -> float | None:
        prompt = self.session.prompt
        return prompt.last.fullness if prompt is not None and prompt.last is not None else None

    def run_task(self, typed: str) -> None:
        try:
            check_task(typed)  # the same size rule as fix and exec (taskinput.py)
        except CloverError as exc:
            print_error(self.console, exc)
            return
        self.transcript.add_user(typed)
        task = self.with_attachments(typed)
        planning = self.modes.mode == PLAN
        if planning:
            task = plan_task(task)
        renderer = ConsoleRenderer(self.console, screen=self.screen, context=self.context_share)
        try:
            with self.turn():
                result = self.session.run_task(task, MultiSink(self.transcript, self.cost, renderer))
        except CloverError as exc:  # e.g. the sandbox stopped working: say so, keep the REPL
            print_error(self.console, exc)
            return
        finally:
            self.screen.suspend()
        self.record(result)
        if result.stop.value == "interrupted" and self.screen.keys is not None:
            self.screen.keys.unqueue()  # nothing queued is sent after an interrupt: it waits at the prompt
        if result.signal is not None:  # SIGTERM/SIGHUP stopped the task: the REPL ends too
            raise Terminated(result.signal)
        if result.summary and result.stop.value == "finished":  # a plain answer was shown as the model wrote it
            print_markdown(self.console, result.summary)
        self.print_context_line()
        if planning and self.modes.mode == PLAN and result.stop.value in ("finished", "answered"):
            from clovercode.front.repl.modes import settle_plan

            settle_plan(self, self.choose, self.read_line)

    def turn(self) -> ContextManager[None]:
        """While a task or a !command runs: Esc interrupts as Ctrl-C does, typed keys do not echo."""
        keys = self.screen.keys
        return keys.turn() if keys is not None else nullcontext()

    def typed_ahead(self) -> str:
        """Text typed while the last turn ran: the next prompt starts with it."""
        return self.screen.keys.take_typed() if self.screen.keys is not None else ""

    def record(self, result) -> None:  # type: ignore[no-untyped-def]
        self.tasks += 1
        self.steps += result.steps
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        self.changed |= set(result.changed)
        checkpoint = getattr(self.session.last_context, "checkpoint", None)
        if self.first_snapshot is None and getattr(checkpoint, "snapshot", None) is not None:
            self.first_snapshot = checkpoint.snapshot

    def print_context_line(self) -> None:
        from clovercode.front.contextcmd import context_line

        prompt = self.session.prompt
        if prompt is not None:
            prompt.sink = None  # the task's trajectory is closed
            prompt.build(self.session.conversation)  # counted with the final answer in the history
        status = context_line(self.session)
        if status:
            # wrapped at words by rich on a terminal (the terminal's own wrap split "messag|e")
            self.console.print(status, style="dim", highlight=False, markup=False, soft_wrap=not self.console.is_terminal)


def _inputs(first: str | None, lines: Iterator[str], console: Console, screen: Screen) -> Iterator[str]:
    """What the REPL handles next: the task from the command line first, then messages queued with
    Enter during the last turn (one message), else a line from the prompt; the first two are shown
    as if typed at the prompt."""
    from rich.text import Text

    from clovercode.front.repl.inputs import PROMPT

    pending = first if first is not None and first.strip() else None
    while True:
        if pending is None and screen.keys is not None:
            queued = screen.keys.take_queued()
            pending = "\n".join(queued) if queued else None
        if pending is not None:
            console.print(Text(PROMPT + inert(pending)), soft_wrap=True)
            text, pending = pending, None
            yield text
            continue
        try:
            yield next(lines)
        except StopIteration:
            return


def make_approver(cfg: Config, console: Console, screen: Screen, tty: bool) -> ModeApprover:
    from clovercode.ground.config import user_config_path
    from clovercode.front.repl.permissions import add_rule
    from clovercode.ui.approval_prompt import make_ask, plain_read_line, tty_read_key, tty_read_line

    def remember(prefix: str) -> None:
        try:
            path = add_rule(os.environ, prefix)
        except CloverError as exc:
            console.print(f"[yellow]the rule `{escape(prefix)}` holds for this session only[/]: {escape(str(exc))}",
                          highlight=False)
            return
        console.print(f"[dim]commands starting `{escape(prefix)}` now run without asking (rule saved in {path}; "
                      "/permissions lists and removes rules)[/]", highlight=False)

    ask = make_ask(console, tty_read_line if tty else plain_read_line, screen, str(user_config_path(os.environ)),
                   read_key=tty_read_key if tty else None)
    return ModeApprover(cfg["approval"], cfg["sandbox"] != "none", ask, cfg["permissions.allow"], remember)


def run_repl(root: Path, cfg: Config, console: Console, resume: str | None = None, any_project: bool = False,
             first_task: str | None = None) -> int:
    """``resume``: a session id, "@latest" (a picker on a terminal) or "@last" (the newest, no picker);
    ``first_task``: the first message, sent before the prompt shows (`clovercode "task"`)."""
    from clovercode.front.repl.inputs import plain_lines, tty_lines

    from clovercode.ui.console import use_theme

    tty = sys.stdin.isatty() and sys.stdout.isatty()
    use_theme(console, cfg["ui.theme"], os.environ, ask_terminal=tty)
    screen = Screen(live=LiveStatus(console, hint=ESC_HINT if tty else CTRL_C_HINT))
    if tty:
        from clovercode.ui.keys import KeyWatcher

        screen.keys = KeyWatcher(sys.stdin.fileno())
        screen.live.pending = screen.keys.pending  # queued messages show under the status line
    approver = make_approver(cfg, console, screen, tty)
    session = open_session(root, cfg, interactive=True, approve=approver, mcp_wait=0)  # MCP servers join when ready
    from clovercode import __version__

    console.print(BANNER.format(version=__version__, root=root), highlight=False, markup=False)
    if cfg["sandbox"] == "none":
        console.print(f"[bold red]{NO_SANDBOX_WARNING}[/]", highlight=False)
    console.print(f"sandbox: {cfg['sandbox']} · approval: {cfg['approval']}", highlight=False, markup=False)
    if approver.notice():
        console.print(f"[yellow]{escape(approver.notice() or '')}[/]", highlight=False)
    for notice in session.take_notices():  # MCP servers that did not start, untrusted project hooks
        console.print(f"[yellow]⚠ {escape(notice)}[/]", highlight=False, soft_wrap=True)
    if session.mcp is not None and session.mcp.starting:  # their tools join when ready (/mcp)
        console.print(f"[dim]MCP servers starting in the background: {escape(', '.join(session.mcp.starting))} "
                      "(/mcp)[/]", highlight=False, soft_wrap=True)
    if resume is not None:
        from clovercode.front.contextcmd import RESUME_LATEST, resume_into

        pick = None
        if resume == "@last":  # --continue
            resume = RESUME_LATEST
        elif tty:
            from clovercode.wiring.sessions import pick_session
            from clovercode.ui.approval_prompt import tty_read_line

            pick = lambda sessions: pick_session(console, sessions, tty_read_line)  # noqa: E731
        try:
            resume_into(session, resume, console, any_project=any_project, pick=pick)
        except BaseException:
            session.close()
            raise
    repl = Repl(root, cfg, console, session, screen, approver)
    from clovercode.ui.approval_prompt import choose, plain_read_line, tty_read_key, tty_read_line

    read_line = tty_read_line if tty else plain_read_line
    read_key = tty_read_key if tty else None
    repl.read_line = read_line
    repl.choose = lambda question, keys: choose(read_line, read_key, question, keys)
    if tty:
        from clovercode.front.repl.completion import FileLister, ReplCompleter

        lines = tty_lines(cfg, ReplCompleter(lambda: [*repl.commands, *repl.custom], FileLister(session.root)),
                          typed_ahead=repl.typed_ahead, modes=repl.modes,
                          theme=getattr(console, "theme_name", "dark"))
    else:
        lines = plain_lines()
    try:
        for line in _inputs(first_task, iter(lines), console, screen):
            try:
                if not repl.handle(line):
                    break
            except Terminated:
                raise
            except KeyboardInterrupt:
                screen.suspend()
                if screen.keys is not None:  # an interrupt that landed as the turn ended may have cut its restore
                    screen.keys.stop()
                    screen.keys.unqueue()
                console.print("[yellow]interrupted[/]")
    except BaseException:  # SIGTERM/SIGHUP (after SIGHUP there is no terminal to print to), or a failure
        if screen.keys is not None:
            screen.keys.stop()  # the terminal as it was, whatever happened
        screen.suspend()
        session.close()
        raise
    session.close()
    if session.session_id:
        console.print(f"[dim]continue this session with: clovercode --resume {session.session_id}[/]",
                      highlight=False, soft_wrap=True)
    return 0

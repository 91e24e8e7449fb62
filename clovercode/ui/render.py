"""Renders loop events on a rich console, each once: a turn's reasoning (dim) and its answer as
Markdown when the turn ends (a transient live region shows it growing, with a status line),
tool calls, observations (long ones cut, with the /show number that expands them), usage.

rich already honours NO_COLOR and drops styling when the output is not a terminal.
"""

from __future__ import annotations

import json
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from clovercode.trust.terminal import inert
from clovercode.ui.live import ContextShare, LiveStatus, StepStatus, command_label
from clovercode.ui.stream import StreamFilter

if TYPE_CHECKING:
    from clovercode.ui.keys import KeyWatcher

OBS_PREVIEW_LINES = 6


def format_args(arguments: dict[str, Any], width: int = 70) -> str:
    """The model's arguments on one line, each cut to ``width``, inert for the terminal."""
    parts = []
    for key, value in arguments.items():
        text = isinstance(value, str)  # quoted; numbers, booleans, lists and objects as JSON (a=2, not a='2')
        shown = value if text else json.dumps(value, ensure_ascii=False)
        first = shown.splitlines()[0] if shown else ""
        extra = len(shown.splitlines()) - 1
        if len(first) > width:
            first = first[:width] + "…"
        parts.append(f"{inert(key, newlines=False)}={inert(repr(first) if text else first, newlines=False)}"
                     + (f" (+{extra} lines)" if extra > 0 else ""))
    return " ".join(parts)


@dataclass
class Screen:
    """What the REPL's parts share about the screen: diffs a person already saw when approving
    them (not printed again), the live region (stopped before a question is asked), and how many
    observations the transcript holds (the number /show takes)."""

    live: LiveStatus | None = None
    approved_diffs: set[str] = field(default_factory=set)
    observation_count: Callable[[], int] = lambda: 0
    keys: "KeyWatcher | None" = None  # Esc and typed-ahead keys during a turn (the REPL on a terminal)
    plan: list[dict[str, str]] | None = None  # the model's last update_plan, drawn as a checklist

    def suspend(self) -> None:
        if self.live is not None:
            self.live.suspend()

    @contextmanager
    def asking(self) -> Iterator[None]:
        """A question mid-turn: the status line and the key watcher step aside (the answer is typed
        with echo, and Esc there cancels the run), then come back: a command allowed to run shows its
        status line while it runs."""
        self.suspend()
        # Keys typed before a question are dropped (approval_prompt.py), those the watcher holds too:
        # a `y⏎` typed while the model wrote was not meant for a question not shown yet.
        with self.keys.paused(discard=True) if self.keys is not None else nullcontext():
            yield
        if self.live is not None:
            self.live.resume()


def print_markdown(console: Console, text: str) -> None:
    """Markdown on a terminal; for a log or a pipe the source itself is the readable form (rich
    would pad every paragraph to the width)."""
    if console.is_terminal:
        from rich.markdown import Markdown  # markdown_it and pygments: loaded at the first answer shown

        console.print(Markdown(inert(text), code_theme="ansi_dark", hyperlinks=False))
    else:
        console.print(Text(inert(text)), soft_wrap=True)


class ConsoleRenderer:
    """An EventSink that draws the run for a person."""

    def __init__(self, console: Console, *, show_reasoning: bool = True, screen: Screen | None = None,
                 context: ContextShare | None = None):
        self.console = console
        self.show_reasoning = show_reasoning
        self.screen = screen or Screen()
        if self.screen.live is None:
            self.screen.live = LiveStatus(console)
        self.context = context
        self.stream = StreamFilter()
        self.status: StepStatus | None = None
        self.last_observation: str | None = None

    @property
    def live(self) -> LiveStatus:
        assert self.screen.live is not None
        return self.screen.live

    def emit(self, kind: str, **data: Any) -> None:
        handler = getattr(self, f"_on_{kind}", None)
        if handler:
            handler(**data)

    def _on_run_start(self, model: str, executor: str, **_: Any) -> None:
        self.console.print(f"[bold green]clovercode[/] · model [cyan]{escape(model)}[/] · sandbox [cyan]{escape(executor)}[/]")

    def _on_step_start(self, step: int, max_steps: int, **_: Any) -> None:
        self.stream = StreamFilter()
        self.console.rule(f"[dim]step {step}/{max_steps}[/]", align="left", style="dim")
        self.status = self.live.start(StepStatus(f"step {step}/{max_steps}", self.context))

    def _on_text_delta(self, text: str, reasoning: bool = False, **_: Any) -> None:
        if self.status is not None:
            self.status.feed(text, [("reasoning", text)] if reasoning else self.stream.feed(text))

    def _on_model_turn(self, content: str, reasoning: str, usage: dict[str, Any], seconds: float, **_: Any) -> None:
        self.live.stop()
        self.status = None
        self._print_turn(reasoning, content)
        total = usage.get("total_prompt_tokens", 0) + usage.get("total_completion_tokens", 0)
        about = "~" if usage.get("usage_estimated") else ""  # counted by clovercode, not by the model's tokenizer
        self.console.print(f"[dim]tokens: {about}{usage.get('prompt_tokens', 0)} in · {about}{usage.get('completion_tokens', 0)} out"
                           f" · {about}{total} this run · {seconds:.1f}s[/]")

    def _print_turn(self, reasoning: str, content: str) -> None:
        if reasoning.strip() and self.show_reasoning:
            # a terminal wraps it at words; a log keeps the lines as written
            self.console.print(Text(inert(reasoning.strip("\n")), style="dim italic"), soft_wrap=not self.console.is_terminal)
        if content.strip():
            print_markdown(self.console, content.strip("\n"))

    def _on_tool_call(self, name: str, arguments: dict[str, Any], **_: Any) -> None:
        if name == "update_plan":  # its checklist says it better than its arguments would
            return
        self.console.print(f"[bold cyan]→ {escape(inert(name, newlines=False))}[/] {escape(format_args(arguments))}")
        if name == "run_command":  # commands can take minutes: say it is still running (a question pauses this)
            command = arguments.get("command")
            label = command_label(command) if isinstance(command, str) else f"running {format_args(arguments, 40)}"
            self.live.start(StepStatus(label, self.context))

    def _on_observation(self, name: str, ok: bool, text: str, data: dict[str, Any], **_: Any) -> None:
        self.live.stop()
        if ok and "plan" in data:
            return  # the checklist was drawn
        self.last_observation = text
        lines = inert(text).splitlines() or [""]
        mark = "[green]✓[/]" if ok else "[red]✗[/]"
        diff = data.get("diff") if ok else None
        head = lines[0].removesuffix(":") if diff else lines[0]  # the colon introduced the diff the model reads
        if not ok:  # the red mark says it failed; the words the model reads speak of "the user", not to them
            head = head.removeprefix("Error: ")
            head = "You declined" + head[len("The user declined"):] if head.startswith("The user declined") else head
        head = escape(head)
        # on a terminal rich wraps at words (the terminal's own wrap split "read|ing"); a log keeps whole lines
        self.console.print(f"  {mark} {head}" if ok else f"  {mark} [red]{head}[/]", soft_wrap=not self.console.is_terminal)
        if diff:
            if diff not in self.screen.approved_diffs:  # shown at the approval already: once is enough
                from rich.syntax import Syntax  # pygments: loaded at the first diff shown

                self.console.print(Syntax(inert(diff), "diff", theme="ansi_dark", background_color="default"))
            self.screen.approved_diffs.discard(diff)
            return
        for line in lines[1:OBS_PREVIEW_LINES]:
            self.console.print(f"    [dim]{escape(line)}[/]", soft_wrap=not self.console.is_terminal)
        if len(lines) > OBS_PREVIEW_LINES:
            number = self.screen.observation_count()
            more = f"… {len(lines) - OBS_PREVIEW_LINES} more lines"
            hint = f" · /show {number} shows all" if number else ""
            self.console.print(f"    [dim]{more}{hint}[/]")

    def _on_plan(self, steps: list[dict[str, str]], explanation: str = "", **_: Any) -> None:
        from clovercode.ui.checklist import print_plan

        self.live.stop()
        self.screen.plan = steps
        print_plan(self.console, steps, explanation)

    def _on_subagent_started(self, child_id: str, description: str, **_: Any) -> None:
        from clovercode.ui.children import ChildrenStatus

        if not isinstance(self.live.status, ChildrenStatus):
            self.live.start(ChildrenStatus())
        self.live.status.add(child_id, description)  # type: ignore[union-attr]

    def _on_subagent_progress(self, child_id: str, status: str, step: int, tokens: int, **_: Any) -> None:
        from clovercode.ui.children import ChildrenStatus

        if isinstance(self.live.status, ChildrenStatus):
            self.live.status.update(child_id, status, step, tokens)

    def _on_subagent_completed(self, child_id: str, description: str, stop_reason: str, steps: int,
                               usage: dict[str, Any], seconds: float, **_: Any) -> None:
        from clovercode.ui.children import ChildrenStatus

        if isinstance(self.live.status, ChildrenStatus):
            self.live.status.end(child_id, stop_reason)
        tokens = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
        style = "green" if stop_reason in ("finished", "answered") else "yellow"
        self.console.print(f"  [{style}]↳ {escape(inert(description, newlines=False))}: {escape(stop_reason)}[/] "
                           f"[dim]({steps} step{'' if steps == 1 else 's'}, {tokens} tokens, {seconds:.1f}s)[/]")

    # `fix --attempts N` (front/fixattempts.py): one row per attempt, its verdict printed when it ends
    def _on_attempt_started(self, attempt: int, of: int, seed: int, temperature: float, **_: Any) -> None:
        from clovercode.ui.children import ChildrenStatus

        if not isinstance(self.live.status, ChildrenStatus) or self.live.status.noun != "attempts":
            self.live.start(ChildrenStatus(noun="attempts", good=("fixed",)))
        self.live.status.add(f"attempt-{attempt}", f"attempt {attempt} of {of} (seed {seed}, temperature {temperature:g})")  # type: ignore[union-attr]

    def _on_attempt_progress(self, attempt: int, status: str, step: int, tokens: int, **_: Any) -> None:
        from clovercode.ui.children import ChildrenStatus

        if isinstance(self.live.status, ChildrenStatus):
            self.live.status.update(f"attempt-{attempt}", status, step, tokens)

    def _on_attempt_completed(self, attempt: int, verdict: str, reason: str | None, steps: int, tokens: dict[str, Any],
                              seconds: float, **_: Any) -> None:
        from clovercode.ui.children import ChildrenStatus

        rows = self.live.status if isinstance(self.live.status, ChildrenStatus) else None
        if rows is not None:
            rows.end(f"attempt-{attempt}", verdict)
        used = (tokens or {}).get("prompt", 0) + (tokens or {}).get("completion", 0)
        style = "green" if verdict == "fixed" else "yellow"
        self.console.print(f"  [{style}]↳ attempt {attempt}: {escape(verdict)}[/] [dim]({escape(inert(reason or '', newlines=False))[:160]}; "
                           f"{steps} step{'' if steps == 1 else 's'}, {used} tokens, {seconds:.1f}s)[/]", highlight=False)
        if rows is not None and all(row.ended is not None for row in rows.rows.values()):
            self.live.stop()  # every attempt has its verdict: the choice and the summary follow

    def _on_format_error(self, text: str | None, **_: Any) -> None:
        if text and text == self.last_observation:
            return  # an invalid call's error was just shown as its observation
        first = text.splitlines()[0] if text else "invalid tool call"
        self.console.print(f"  [yellow]⚠ {escape(inert(first))}[/]")

    def _on_hook(self, event: str, command: str, blocked: bool, exit_code: int | None, **_: Any) -> None:
        if blocked:  # a failing hook is reported as a warning; a quiet success says nothing
            self.console.print(f"  [yellow]↳ {escape(event)} hook `{escape(inert(command))}` objected[/]", highlight=False)

    def _on_warning(self, text: str, quiet: bool = False, **_: Any) -> None:
        text = inert(text)
        self.console.print(f"  [dim]{escape(text)}[/]" if quiet else f"  [yellow]⚠ {escape(text)}[/]")

    def _on_run_end(self, stop_reason: str, steps: int, detail: str, **_: Any) -> None:
        self.live.stop()
        if self.status is not None:  # interrupted mid-turn: keep what was written
            status, self.status = self.status, None
            self._print_turn("".join(p for k, p in status.parts if k == "reasoning"),
                             "".join(p for k, p in status.parts if k == "content"))
        if self.screen.keys is not None and self.screen.keys.fired:  # the interrupt came from the Esc key
            detail = detail.replace("(Ctrl-C)", "(Esc)")
        style = "green" if stop_reason in ("finished", "answered") else "yellow"
        count = "" if stop_reason == "max_steps" else f" [dim]({steps} step{'' if steps == 1 else 's'})[/]"  # the detail already says it
        self.console.print(f"[{style}]■ stopped: {escape(inert(detail))}[/]{count}")

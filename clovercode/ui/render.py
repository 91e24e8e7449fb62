"""Renders loop events on a rich console: streamed text, tool calls, observations, usage.

rich already honours NO_COLOR and drops styling when the output is not a terminal.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax
from rich.text import Text

from clovercode.ui.stream import StreamFilter

OBS_PREVIEW_LINES = 6


def format_args(arguments: dict[str, Any], width: int = 70) -> str:
    parts = []
    for key, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        first = shown.splitlines()[0] if shown else ""
        extra = len(shown.splitlines()) - 1
        if len(first) > width:
            first = first[:width] + "…"
        parts.append(f"{key}={first!r}" + (f" (+{extra} lines)" if extra > 0 else ""))
    return " ".join(parts)


class ConsoleRenderer:
    """An EventSink that draws the run for a person."""

    def __init__(self, console: Console, *, show_reasoning: bool = True):
        self.console = console
        self.show_reasoning = show_reasoning
        self.stream = StreamFilter()
        self.at_line_start = True
        self.last_style = ""

    def emit(self, kind: str, **data: Any) -> None:
        handler = getattr(self, f"_on_{kind}", None)
        if handler:
            handler(**data)

    def _write(self, text: str, style: str = "") -> None:
        if style != self.last_style:  # reasoning and prose each start on their own line
            self._newline()
            self.last_style = style
        if self.at_line_start:
            text = text.lstrip("\n")  # no blank lines from the model's own framing newlines
        if text:
            self.console.print(Text(text, style=style), end="", soft_wrap=True)
            self.at_line_start = text.endswith("\n")

    def _newline(self) -> None:
        if not self.at_line_start:
            self.console.print()
            self.at_line_start = True

    def _on_run_start(self, model: str, executor: str, **_: Any) -> None:
        self.console.print(f"[bold green]clovercode[/] · model [cyan]{escape(model)}[/] · sandbox [cyan]{escape(executor)}[/]")

    def _on_step_start(self, step: int, max_steps: int, **_: Any) -> None:
        self._newline()
        self.stream = StreamFilter()
        self.console.rule(f"[dim]step {step}/{max_steps}[/]", align="left", style="dim")

    def _on_text_delta(self, text: str, reasoning: bool = False, **_: Any) -> None:
        if reasoning:
            segments = [("reasoning", text)]
        else:
            segments = self.stream.feed(text)
        for kind, part in segments:
            if kind == "reasoning" and not self.show_reasoning:
                continue
            self._write(part, "dim italic" if kind == "reasoning" else "")

    def _on_model_turn(self, usage: dict[str, Any], seconds: float, **_: Any) -> None:
        for kind, part in self.stream.flush():
            self._write(part, "dim italic" if kind == "reasoning" else "")
        self._newline()
        total = usage.get("total_prompt_tokens", 0) + usage.get("total_completion_tokens", 0)
        about = "~" if usage.get("usage_estimated") else ""  # counted by clovercode, not by the model's tokenizer
        self.console.print(f"[dim]tokens: {about}{usage.get('prompt_tokens', 0)} in · {about}{usage.get('completion_tokens', 0)} out"
                           f" · {about}{total} this run · {seconds:.1f}s[/]")

    def _on_tool_call(self, name: str, arguments: dict[str, Any], **_: Any) -> None:
        self._newline()
        self.console.print(f"[bold cyan]→ {escape(name)}[/] {escape(format_args(arguments))}")

    def _on_observation(self, name: str, ok: bool, text: str, data: dict[str, Any], **_: Any) -> None:
        diff = data.get("diff") if ok else None
        if diff:
            self.console.print(Syntax(diff, "diff", theme="ansi_dark", background_color="default"))
            return
        lines = text.splitlines() or [""]
        mark = "[green]✓[/]" if ok else "[red]✗[/]"
        head = escape(lines[0])
        self.console.print(f"  {mark} {head}" if ok else f"  {mark} [red]{head}[/]")
        for line in lines[1:OBS_PREVIEW_LINES]:
            self.console.print(f"    [dim]{escape(line)}[/]", soft_wrap=True)
        if len(lines) > OBS_PREVIEW_LINES:
            self.console.print(f"    [dim]… {len(lines) - OBS_PREVIEW_LINES} more lines[/]")

    def _on_format_error(self, text: str, **_: Any) -> None:
        first = (text or "").splitlines()[0] if text else "invalid tool call"
        self.console.print(f"  [yellow]⚠ {escape(first)}[/]")

    def _on_hook(self, event: str, command: str, blocked: bool, exit_code: int | None, **_: Any) -> None:
        if blocked:  # a failing hook is reported as a warning; a quiet success says nothing
            self.console.print(f"  [yellow]↳ {escape(event)} hook `{escape(command)}` objected[/]", highlight=False)

    def _on_warning(self, text: str, quiet: bool = False, **_: Any) -> None:
        self.console.print(f"  [dim]{escape(text)}[/]" if quiet else f"  [yellow]⚠ {escape(text)}[/]")

    def _on_run_end(self, stop_reason: str, steps: int, detail: str, **_: Any) -> None:
        self._newline()
        style = "green" if stop_reason in ("finished", "answered") else "yellow"
        count = "" if stop_reason == "max_steps" else f" [dim]({steps} step{'' if steps == 1 else 's'})[/]"  # the detail already says it
        self.console.print(f"[{style}]■ stopped: {escape(detail)}[/]{count}")

"""The live display while a suite runs: a progress bar over attempts, the running task and its step,
and one line per finished attempt (that line is all that shows when the output is not a terminal)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from clovercode.eval.tasks import Task


class ProgressDisplay:
    def __init__(self, console: Console, total: int, repeats: int):
        self.console, self.repeats = console, repeats
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True)
        self.bar = self.progress.add_task("starting", total=total)
        self.label = ""
        self.invalid = 0

    def __enter__(self) -> "ProgressDisplay":
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def attempt_started(self, task: Task, repeat: int) -> None:
        self.label = task.id + (f" #{repeat}" if self.repeats > 1 else "")
        self.invalid = 0
        self.progress.update(self.bar, description=f"{escape(self.label)} · setting up")

    def emit(self, kind: str, **data: Any) -> None:
        if kind == "step_start":
            self.progress.update(self.bar, description=f"{escape(self.label)} · step {data['step']}/{data['max_steps']}"
                                 + (f" · {self.invalid} invalid" if self.invalid else ""))
        elif kind == "model_turn":
            calls = data.get("calls") or []
            if data.get("errors") or not calls or not all(c.get("valid") for c in calls):
                self.invalid += 1
        elif kind == "run_end":
            self.progress.update(self.bar, description=f"{escape(self.label)} · hidden tests")

    def attempt_finished(self, attempt: dict[str, Any]) -> None:
        self.progress.advance(self.bar)
        status = attempt["status"]
        mark = {"passed": "[green]✓ passed[/]", "failed": "[red]✗ failed[/]"}.get(status, f"[yellow]! {status}[/]")
        detail = attempt.get("error") or (f"{attempt.get('stop_reason')} after {attempt.get('steps')} steps, "
                                          f"{attempt.get('seconds', 0):.1f}s")
        self.console.print(f"{mark} {escape(self.label)} [dim]· {escape(detail)}[/]", highlight=False, soft_wrap=True)

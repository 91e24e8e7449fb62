"""The REPL's live lines for subagents: one row per child of the running step (its task, what it is
doing, its step, tokens, elapsed time), under one status line that says how to interrupt them all.
The attempts of ``fix --attempts N`` run from the REPL (``/fix``) are drawn the same way."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from rich.console import Console, Group
from rich.text import Text

from clovercode.trust.terminal import inert
from clovercode.ui.live import StepStatus


@dataclass
class ChildRow:
    description: str
    started: float
    status: str = "starting"
    step: int = 0
    tokens: int = 0
    ended: float | None = None


class ChildrenStatus(StepStatus):
    """A StepStatus whose body is the children's rows (the model's text belongs to each child's
    trajectory). ``fix --attempts`` draws its attempts the same way: ``noun`` "attempts", and the
    verdict ``fixed`` is the good end."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, noun: str = "subagents",
                 good: tuple[str, ...] = ("finished", "answered")):
        super().__init__(noun, None, clock)
        self.noun, self.good = noun, good
        self.rows: dict[str, ChildRow] = {}

    def add(self, child_id: str, description: str) -> None:
        self.rows[child_id] = ChildRow(inert(description, newlines=False), self.clock())

    def update(self, child_id: str, status: str, step: int, tokens: int) -> None:
        row = self.rows.get(child_id)
        if row is not None and row.ended is None:
            row.status, row.step, row.tokens = inert(status, newlines=False), step, tokens

    def end(self, child_id: str, status: str) -> None:
        row = self.rows.get(child_id)
        if row is not None:
            row.status, row.ended = status, self.clock()

    def row_text(self, row: ChildRow) -> Text:
        elapsed = (row.ended or self.clock()) - row.started
        mark = "✓" if row.ended is not None and row.status in self.good else ("■" if row.ended else "·")
        return Text(f"  {mark} {row.description} · {row.status} · step {row.step} · {row.tokens} tokens · {elapsed:.0f}s",
                    style="dim")

    def line(self, hint: bool = True) -> Text:
        running = sum(row.ended is None for row in self.rows.values())
        bits = [f"{running} of {len(self.rows)} {self.noun} running", f"{self.clock() - self.started:.0f}s"]
        if hint:
            bits.append(self.hint.replace("interrupts", "interrupts all"))
        return Text(" · ".join(bits), style="dim")

    def __rich_console__(self, console: Console, options):  # type: ignore[no-untyped-def]
        status = Text.assemble(self.spinner.render(self.clock()), " ", self.line())
        yield Group(*(self.row_text(row) for row in self.rows.values()), status)



"""The one place consoles are made: no automatic highlighting (it recolours file contents and
numbers in tool output), styling dropped by rich itself for NO_COLOR and non-terminals."""

from __future__ import annotations

from rich.console import Console


def make_console(*, stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False)

"""A plan (update_plan's steps) as a checklist for a terminal: one row per step, a mark for its
status; ASCII marks where the output's encoding cannot show the others."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from clovercode.trust.terminal import inert

MARKS = {"completed": ("✓", "[x]"), "in_progress": ("▸", "[>]"), "pending": ("○", "[ ]")}
STYLES = {"completed": "green", "in_progress": "bold", "pending": "dim"}


def can_show(console: Console, text: str) -> bool:
    """Whether ``console``'s output encoding has every character of ``text``."""
    try:
        text.encode(console.encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def print_plan(console: Console, steps: list[dict[str, str]], explanation: str = "") -> None:
    unicode = can_show(console, "".join(mark for mark, _ in MARKS.values()))
    done = sum(item.get("status") == "completed" for item in steps)
    console.print(f"[bold]Plan[/] [dim]({done}/{len(steps)} done)[/]", highlight=False)
    for item in steps:
        status = item.get("status", "pending")
        mark = MARKS.get(status, MARKS["pending"])[0 if unicode else 1]
        text = escape(inert(str(item.get("step", "")), newlines=False))
        if status == "completed":
            text = f"[strike]{text}[/]"
        console.print(f"  [{STYLES.get(status, 'dim')}]{escape(mark)} {text}[/]", highlight=False, soft_wrap=True)
    if explanation:
        console.print(f"  [dim]{escape(inert(explanation))}[/]", highlight=False, soft_wrap=True)

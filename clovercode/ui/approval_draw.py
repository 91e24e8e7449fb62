"""The approval view (actions/approval_view.py) drawn on a rich console: every line wrapped at the
console's width, never cropped (a wrapped row starts with a continuation mark, so it cannot pass
for a line of its own), what the renderer made visible drawn in reverse video, the lines held back
by the preview counted with the key that shows them."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from clovercode.actions.approval_view import ApprovalView, ViewLine, visible
from clovercode.ui.checklist import can_show

STYLES = {"add": "green", "del": "red", "hunk": "cyan", "file": "bold", "command": "bold", "context": "", "text": ""}
MARKED = "reverse"
GUTTERS = {"add": "+", "del": "-", "context": " ", "hunk": "", "file": "", "text": "  "}


def draw_view(console: Console, view: ApprovalView, *, everything: bool = False, more_key: str = "v") -> None:
    heading = Text(view.heading, style="bold yellow")
    if view.note:
        heading.append(f" ({view.note})", style="dim")
    console.print(heading)
    shown = view.lines if everything or not view.hidden else view.lines[:view.preview]
    for index, line in enumerate(shown):
        gutter = ("  $ " if index == 0 else "  > ") if line.kind == "command" else GUTTERS.get(line.kind, "")
        draw_line(console, line, gutter)
    if view.hidden and not everything:
        console.print(f"  … {view.hidden} more lines · {more_key} shows every line", style="yellow", highlight=False)
    for warning in view.warnings:
        console.print(Text(f"  ! {warning}", style="yellow"))  # wrapped at words by rich


def draw_line(console: Console, line: ViewLine, gutter: str) -> None:
    style = STYLES.get(line.kind, "")
    body = Text(style=style)
    for text, marked in line.parts:
        body.append(text, style=f"{style} {MARKED}".strip() if marked else style)
    width = max(8, console.width - len(gutter))
    rows = body.wrap(console, width, overflow="fold") if body.plain else [body]
    mark = "↪" if can_show(console, "↪") else ">"
    continued = (" " * (len(gutter) - 1) + mark) if gutter.strip() or len(gutter) > 1 else mark
    for number, row in enumerate(rows):
        prefix = Text(gutter if number == 0 else continued.ljust(len(gutter) or 1), style=style or "dim")
        console.print(prefix + row, soft_wrap=True, no_wrap=True, crop=False, highlight=False)


def draw_contents(console: Console, view: ApprovalView) -> None:
    """Each file of an edit as it will be, whole, with line numbers (what the diff's context hides)."""
    for change in view.changes:
        if change.new is None:
            console.print(Text(f"── {change.path}: deleted", style="bold"))
            continue
        lines = change.new.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        console.print(Text(f"── {change.path} as it will be ({len(lines)} lines)", style="bold"), soft_wrap=True)
        digits = len(str(len(lines)))
        for number, raw in enumerate(lines, 1):
            draw_line(console, ViewLine("text", visible(raw)), f"{number:>{digits}} ")

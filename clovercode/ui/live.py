"""The live region at the bottom of a terminal while a step runs: the tail of what the model is
writing and one status line (elapsed time, tokens, context use, how to interrupt). It is transient:
when the turn ends it disappears and the turn is printed once, in full (ui/render.py). Where the
output is not a terminal (a log, a pipe, CI) the same status line goes to stderr every ~10 s instead."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Mapping

from rich.console import Console, Group
from rich.control import Control
from rich.live import Live
from rich.live_render import LiveRender
from rich.segment import ControlType
from rich.spinner import Spinner
from rich.text import Text

from clovercode.context.tokens import estimate_tokens
from clovercode.trust.terminal import inert
from clovercode.ui.glyphs import is_unicode
from clovercode.ground.heartbeat import HEARTBEAT_SECONDS, Heartbeat, to_stderr

ContextShare = Callable[[], "float | None"]  # how full the window is (0..1), when known
CTRL_C_HINT = "Ctrl-C interrupts"
ESC_HINT = "Esc/Ctrl-C interrupts"  # where a key watcher turns Esc into Ctrl-C (the REPL, ui/keys.py)
COMMAND_WIDTH = 60


def command_label(command: str) -> str:
    """A running command for the status line: its first line, cut, inert (it is the model's text)."""
    lines = command.strip().split("\n")  # not splitlines(): a \r is shown as \r, never a line end that hides the rest
    first = lines[0] if len(lines[0]) <= COMMAND_WIDTH else lines[0][:COMMAND_WIDTH] + "…"
    more = " …" if len(lines) > 1 and not first.endswith("…") else ""
    return f"running `{inert(first, newlines=False)}{more}`"


TAIL_ROWS = 8  # the most rows of the model's text the live region shows


def tail_rows(height: int, below: int) -> int:
    """How many rows of the model's text to show: at most TAIL_ROWS and half of what the screen has
    left. The region must stay well short of the screen: a terminal that gets shorter scrolls its top
    rows into the scrollback, and rows of a live region left there are stale copies nothing erases."""
    return max(0, min(TAIL_ROWS, (height - 1 - below) // 2))


def one_row(text: Text) -> Text:
    """A line the region keeps on one row at any width (cut with an ellipsis), never wrapped to two."""
    text.no_wrap, text.overflow = True, "ellipsis"
    return text


class StepStatus:
    """A rich renderable redrawn a few times a second by rich.live.Live."""

    def __init__(self, label: str, context: ContextShare | None = None, clock: Callable[[], float] = time.monotonic):
        self.label, self.context, self.clock = label, context, clock
        self.started = clock()
        self.parts: list[tuple[str, str]] = []  # (kind, text) shown so far: "reasoning" | "content"
        self.written = ""
        self.spinner = Spinner("dots", style="cyan")
        self.hint = CTRL_C_HINT  # how to interrupt, set by the LiveStatus that shows it
        self.pending: Callable[[], tuple[list[str], str]] | None = None  # queued messages and draft (ui/keys.py)

    def feed(self, text: str, kinds: list[tuple[str, str]]) -> None:
        self.written += text
        self.parts.extend((kind, inert(part)) for kind, part in kinds)  # the model's text, drawn as it streams

    def line(self, hint: bool = True) -> Text:
        bits = [self.label, f"{self.clock() - self.started:.0f}s"]
        if self.written:
            bits.append(f"{estimate_tokens(self.written)} tokens")
        share = self.context() if self.context else None
        if share is not None:
            bits.append(f"context {share:.0%}")
        if hint:
            bits.append(self.hint)
        return Text(" · ".join(bits), style="dim")

    def tail(self, height: int, console: Console | None = None, width: int = 0) -> Text:
        """The last ``height`` rows written; with a console, wrapped at ``width`` here, so each row is
        one screen row that no later redraw at another width can turn into two."""
        text = Text()
        for kind, part in self.parts:
            text.append(part, style="dim italic" if kind == "reasoning" else "")
        keep = max(height, 0)
        if not keep or not text.plain.strip():
            return Text()
        rows: list[Text] = []
        for line in text.split("\n", allow_blank=True)[-keep:]:  # each line is a row or more: the last keep suffice
            rows.extend(line.wrap(console, width, overflow="fold") if console is not None and width > 0 and line.plain
                        else [line])
        return Text("\n", no_wrap=True, overflow="crop").join(rows[-keep:])

    def __rich_console__(self, console: Console, options):  # type: ignore[no-untyped-def]
        below = [one_row(row) for row in self.below()]
        tail = self.tail(tail_rows(options.height or console.height, len(below)), console, options.max_width)
        status = one_row(Text.assemble(self.spinner.render(self.clock()), " ", self.line()))
        yield Group(*([tail] if tail.plain else []), status, *below)

    def below(self) -> list[Text]:
        """Under the status line, dim: messages queued with Enter and the line being typed."""
        queued, draft = self.pending() if self.pending is not None else ([], "")
        rows = [Text(f"  queued: {inert(message, newlines=False)}", style="dim") for message in queued]
        if draft:
            rows.append(Text(f"  typing: {inert(draft, newlines=False)}", style="dim"))
        if queued:
            rows.append(Text("  sent when this turn ends · Backspace on an empty line takes the last back", style="dim"))
        return rows


# Terminals that re-wrap their lines when they get narrower (tmux, VTE, kitty, iTerm2, WezTerm, Windows
# Terminal, Konsole, Alacritty), known by what they put in the environment. xterm cuts lines instead.
REFLOW_MARKERS = ("TMUX", "VTE_VERSION", "KITTY_WINDOW_ID", "WT_SESSION", "KONSOLE_VERSION", "ALACRITTY_SOCKET",
                  "WEZTERM_PANE")
REFLOW_PROGRAMS = ("iTerm.app", "WezTerm", "vscode", "ghostty")


def terminal_reflows(env: Mapping[str, str]) -> bool:
    """Does this terminal re-wrap lines on a resize? Only a known one counts: erasing rows as if it did,
    where it did not, would erase the answer above the live region."""
    return any(env.get(name) for name in REFLOW_MARKERS) or env.get("TERM_PROGRAM", "") in REFLOW_PROGRAMS


class ReflowRender(LiveRender):
    """rich's live region, which knows how many screen rows its last frame takes after the terminal
    re-wrapped it: a frame drawn 120 columns wide takes two rows a line at 60 on tmux, and moving up one
    row a line left the other half of each on the screen (issue 49)."""

    def __init__(self, renderable: Any, console: Console, reflows: bool, **kwargs: Any):
        super().__init__(renderable, **kwargs)
        self.console, self.reflows = console, reflows
        self.lengths: list[int] = []

    def __rich_console__(self, console: Console, options):  # type: ignore[no-untyped-def]
        lines = list(super().__rich_console__(console, options))
        self.lengths, length = [], 0
        for segment in lines:
            if segment.text == "\n" and not segment.control:
                self.lengths.append(length)
                length = 0
            elif not segment.control:
                length += segment.cell_length
        self.lengths.append(length)
        yield from lines

    def rows(self) -> int:
        height = self._shape[1] if self._shape is not None else 0
        width = self.console.width
        if not self.reflows or not self.lengths or width <= 0 or max(self.lengths) <= width:
            return height
        return sum(max(1, -(-length // width)) for length in self.lengths)

    def position_cursor(self) -> Control:
        if self._shape is None:
            return Control()
        up = ((ControlType.CURSOR_UP, 1), (ControlType.ERASE_IN_LINE, 2)) * (self.rows() - 1)
        return Control(ControlType.CARRIAGE_RETURN, (ControlType.ERASE_IN_LINE, 2), *up)

    def restore_cursor(self) -> Control:
        if self._shape is None:
            return Control()
        return Control(ControlType.CARRIAGE_RETURN, *((ControlType.CURSOR_UP, 1), (ControlType.ERASE_IN_LINE, 2)) * self.rows())


class LiveStatus:
    """Starts and stops the transient Live region; where the output is not a terminal, a heartbeat:
    the status line on stderr every ``every`` seconds (nothing for a step shorter than that)."""

    def __init__(self, console: Console, write: Callable[[str], None] = to_stderr, every: float = HEARTBEAT_SECONDS,
                 hint: str = CTRL_C_HINT):
        self.console, self.hint = console, hint
        self.live: Live | None = None
        self.status: StepStatus | None = None
        self.held: StepStatus | None = None  # shown before a question was asked; back after the answer
        self.write, self.every = write, every
        self.beat: Heartbeat | None = None
        self.pending: Callable[[], tuple[list[str], str]] | None = None  # the REPL's key watcher, on a terminal

    @property
    def enabled(self) -> bool:
        return self.console.is_terminal and not self.console.is_dumb_terminal

    def start(self, status: StepStatus) -> StepStatus:
        self.stop()
        self.status = status
        status.hint, status.pending = self.hint, self.pending
        if not is_unicode(self.console.encoding):  # braille dots cannot be shown: the ASCII spinner
            status.spinner = Spinner("line", style="cyan")
        if self.enabled:
            self.live = Live(status, console=self.console, transient=True, refresh_per_second=8,
                             vertical_overflow="crop", redirect_stdout=False, redirect_stderr=False)
            self.live._live_render = ReflowRender(status, self.console, terminal_reflows(os.environ),
                                                  vertical_overflow="crop")
            # drawn now, by this thread: a line printed before rich's refresh thread first drew it took
            # the region as not on the screen, and went on after its status row (test_progress.py)
            self.live.start(refresh=True)
        else:
            self.beat = Heartbeat(lambda: f"… {status.line(hint=False).plain}", self.write, self.every).start()
        return status

    def suspend(self) -> None:
        """Stop showing the status for a question; :meth:`resume` shows it again after the answer."""
        held = self.status if self.status is not None else self.held
        self.stop()
        self.held = held

    def resume(self) -> None:
        status, self.held = self.held, None
        if status is not None:
            status.started = status.clock()  # a command's time starts once it was allowed to run
            self.start(status)

    def stop(self) -> None:
        self.held = None
        if self.beat is not None:
            self.beat.stop()
            self.beat = None
        if self.live is not None:
            self.live.stop()
            self.live = None
        self.status = None

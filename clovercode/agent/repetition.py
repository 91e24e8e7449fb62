"""Spotting a reply that has degenerated into a loop, so the step stops paying for it.

Small and quantized models (and large ones on a bad day) fall into repeating one phrase until the
token limit: 4,096 tokens of `_path_path_path…` cost minutes on a CPU and fill the context window
with junk. A reply whose last ``window`` characters are one unit of at most ``window / MIN_REPEATS``
characters repeated is cut after the first copy of that unit, and the model is told why.
Real code is rarely exactly periodic over a whole window: a table or a ruler line repeats a unit
a few times, not for a thousand characters.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_REPEATS = 4  # the unit fills the window at least this many times
CHECK_EVERY = 64  # characters of new text between checks: the check costs O(window²/MIN_REPEATS) at worst


def repeating_period(text: str, window: int) -> int | None:
    """The shortest period p when the last ``window`` characters of ``text`` repeat a unit of p
    characters (p ≤ window // MIN_REPEATS); None when they do not, or when ``window`` is 0."""
    if window <= 0 or len(text) < window:
        return None
    tail = text[-window:]
    last = tail[-1]
    for period in range(1, window // MIN_REPEATS + 1):
        if tail[-1 - period] == last and tail[period:] == tail[:-period]:
            return period
    return None


@dataclass
class RepetitionGuard:
    """Fed the reply as it streams; ``tripped`` once its tail is a loop (checked every CHECK_EVERY chars)."""

    window: int
    text: str = ""
    period: int | None = None
    _unchecked: int = 0

    def feed(self, chunk: str) -> bool:
        """Add ``chunk``; True when the reply has become a loop and generation should stop."""
        if self.window <= 0 or self.period is not None:
            return self.period is not None
        self.text += chunk
        self._unchecked += len(chunk)
        if self._unchecked >= CHECK_EVERY:
            self._unchecked = 0
            self.period = repeating_period(self.text, self.window)
        return self.period is not None

    @property
    def tripped(self) -> bool:
        return self.period is not None

    def trimmed(self) -> str:
        """The reply up to and including the first copy of the repeated unit."""
        if self.period is None:
            return self.text
        text, period = self.text, self.period
        start = len(text) - self.window  # the loop may have begun before the window: find where
        while start > 0 and text[start - 1] == text[start - 1 + period]:
            start -= 1
        return text[:start + period]

    def unit(self, limit: int = 60) -> str:
        """The repeated unit, shortened for a message."""
        if self.period is None:
            return ""
        unit = self.text[len(self.text) - self.period:]
        return unit if len(unit) <= limit else unit[:limit] + "…"

    def feedback(self) -> str:
        return (f"Your reply was cut off: it kept repeating {self.unit()!r} "
                f"({self.window} characters of the same {self.period}-character text). "
                "Do not repeat yourself: reply with one tool call that moves the task forward, "
                "or call `finish` when you are done.")

"""A loop brake for a turn that must call: a run of lines may not come more than a few times in a row.

Small models fall into writing one line, or a few lines, over and over (SmolLM2-135M wrote
``<description>`` forty times into a ``finish`` summary, then ``<description>`` / ``<type>`` pairs,
then one sentence with a blank line after each, until the token limit cut the call, or the harness's
loop guard cut the reply). The grammar cannot say "no run of lines repeats" (that is not a regular
language), so the constraint adds it: a token that would complete the first line of the
(MAX_REPEATS + 1)-th copy in a row of a unit of up to MAX_UNIT non-blank lines is forbidden like a
token the grammar forbids. The model then writes something else of its own; the brake never writes
anything for it. Blank lines are free and do not break a run (``A``, blank, ``A``, blank, ``A`` is
three copies of ``A``). Lines are compared as bytes, less trailing blanks (the model escaped a loop of
one sentence by adding a space to every fourth copy); leading ones, the indentation of code, count.
What is refused is finishing the line: a token that completes it and then has a line break; the line
may still go on into something new.

A loop within one line (a sentence appended to itself) has no lines to compare; for it the brake
keeps the agent's loop-guard rule token by token (:func:`periodic_continuations`): no window of
text may be one short unit repeated. :class:`LoopBrake` holds both rules for the constraint.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Sequence

MAX_REPEATS = 3  # copies in a row of a unit of lines that text may hold; the first line of the next is refused
MAX_UNIT = 8  # the most lines a repeated unit may have for the brake to see it
TAIL_BYTES = 4096  # text kept to compare lines (a longer unit is never braked)
BLANKS = b" \t\r"


def repeat_continuation(tail: bytes, limit: int = MAX_REPEATS, unit: int = MAX_UNIT) -> bytes | None:
    """What the line being written must not become: the bytes still missing from the first line of
    one more copy of a unit of lines that ends ``tail`` ``limit`` times in a row (b"" when only its
    line break is missing). None when no such run is open, or when the line already differs."""
    lines = tail.split(b"\n")
    partial = lines[-1]
    # The tail's first line may be cut: it never counts. Trailing blanks do not make a line new.
    done = [line.rstrip(BLANKS) for line in lines[1:-1] if line.strip()]
    for size in range(1, unit + 1):
        if len(done) < size * limit:
            return None
        block = done[-size:]
        if all(done[len(done) - size * (k + 1):len(done) - size * k] == block for k in range(1, limit)):
            first = block[0]
            if first.startswith(partial):
                return first[len(partial):]
            return b"" if partial.rstrip(BLANKS) == first else None
    return None


def completes(piece: bytes, rest: bytes) -> bool:
    """Does a token's bytes finish the refused line: ``rest``, then blanks at most, then a line break?"""
    return piece.startswith(rest) and piece[len(rest):].lstrip(BLANKS).startswith(b"\n")


class TokenPrefixes:
    """Which tokens' bytes begin with given bytes (a sorted index, built once per tokenizer)."""

    def __init__(self, pieces: Sequence[bytes]):
        self.pieces = list(pieces)
        self.sorted = sorted((p, i) for i, p in enumerate(pieces) if p)
        self.keys = [p for p, _ in self.sorted]
        self.longest = max((len(p) for p in self.keys), default=0)
        self._breaks: list[int] | None = None

    def completing(self, rest: bytes) -> list[int]:
        """The tokens that finish a refused line (see :func:`completes`)."""
        if not rest:
            if self._breaks is None:  # blanks then a line break: few tokens, found once
                self._breaks = [i for p, i in self.sorted if completes(p, b"")]
            return self._breaks
        return [i for i in self.starting_with(rest) if completes(self.pieces[i], rest)]

    def starting_with(self, prefix: bytes) -> list[int]:
        at = bisect_left(self.keys, prefix)
        found = []
        while at < len(self.keys) and self.keys[at].startswith(prefix):
            found.append(self.sorted[at][1])
            at += 1
        return found


def periodic_continuations(tail: bytes, window: int, longest: int) -> list[bytes]:
    """The loop guard's rule, kept instead of enforced after the fact: the bytes that would make the
    last ``window`` bytes one unit of at most ``window // 4`` bytes repeated (a loop within a line,
    ``;;;;`` or one sentence appended to itself, which the line brake cannot see). One entry per
    period whose run at the end of ``tail`` is at most ``longest`` bytes short of the window; a
    token that starts with an entry is refused. About 20 µs in plain Python (numpy's fixed costs
    were larger), since few periods survive the first checks."""
    size = len(tail)
    if window < 4 or size + longest < window:
        return []
    most = window // 4
    need = window - most - longest  # every run that matters covers at least the last `need` bytes
    step = max(1, need // 16)
    probes = [size - 1 - i * step for i in range(16) if i * step < need]
    found = set()
    last = tail[-1]
    for period in range(1, min(most, size - 1) + 1):
        if tail[-1 - period] != last or any(tail[i] != tail[i - period] for i in probes):  # i >= period
            continue
        missing = window - period - _run(tail, period)  # a run's first period repeats nothing yet
        if 0 < missing <= longest:
            found.add((tail[-period:] * (missing // period + 1))[:missing])
    return sorted(found)


def _run(tail: bytes, period: int) -> int:
    """How many bytes at the end of ``tail`` each equal the byte ``period`` before them."""
    low, high = 0, len(tail) - period  # the run is at least low and at most high long
    while low < high:
        mid = (low + high + 1) // 2
        if tail[len(tail) - mid:] == tail[len(tail) - mid - period:len(tail) - period]:
            low = mid
        else:
            high = mid - 1
    return low


@dataclass(frozen=True)
class LoopBrake:
    """Both brakes as one rule for the constraint: at most ``max_repeats`` copies in a row of a unit
    of lines (0: off), and no ``window`` bytes that repeat one short unit (0: off)."""

    max_repeats: int = MAX_REPEATS
    window: int = 0

    @property
    def on(self) -> bool:
        return self.max_repeats > 0 or self.window > 0

    @property
    def tail_bytes(self) -> int:
        """How much of the text the brake needs to see."""
        return max(TAIL_BYTES, self.window + 64)

    def refused(self, tail: bytes, prefixes: "TokenPrefixes") -> list[int]:
        """The tokens that may not come next after ``tail``."""
        found: list[int] = []
        rest = repeat_continuation(tail, self.max_repeats) if self.max_repeats > 0 else None
        if rest is not None:
            found += prefixes.completing(rest)
        for continuation in periodic_continuations(tail, self.window, prefixes.longest):
            found += prefixes.starting_with(continuation)
        return found

    def first_refused(self, tail: bytes, pieces: Sequence[bytes]) -> int:
        """The index of the first piece (a token's bytes, in order after ``tail``) that is refused."""
        keep = self.tail_bytes
        for index, piece in enumerate(pieces):
            if self.max_repeats > 0:
                rest = repeat_continuation(tail, self.max_repeats)
                if rest is not None and completes(piece, rest):
                    return index
            if any(piece.startswith(c) for c in periodic_continuations(tail, self.window, len(piece))):
                return index
            tail = (tail + piece)[-keep:]
        return len(pieces)

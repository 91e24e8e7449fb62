"""A loop brake inside tool calls: the same line may not come more than a few times in a row.

Small models fall into writing one line over and over inside a value (SmolLM2-135M wrote
``<description>`` forty times into a ``finish`` summary until its token limit cut the call). The
grammar cannot say "no line repeats" (that is not a regular language), so the constraint adds it:
a token that would complete the (MAX_SAME_LINES + 1)-th identical non-blank line in a row is
forbidden like a token the grammar forbids. The model then writes something else of its own; the
brake never writes anything for it. Blank lines are free. Lines are compared as bytes.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Sequence

MAX_SAME_LINES = 3  # identical non-blank lines in a row that a value may hold; the next one is refused
TAIL_BYTES = 4096  # text kept to compare lines (a longer line is never braked)


def repeat_continuation(tail: bytes, limit: int = MAX_SAME_LINES) -> bytes | None:
    """The bytes that would complete one more copy of the line repeated ``limit`` times at the end of
    ``tail`` (the rest of that line and its line break); None when no such run is open."""
    lines = tail.split(b"\n")
    partial, done = lines[-1], lines[:-1]
    if len(done) < limit + 1:  # the first line of the tail may be cut: it never counts
        return None
    line = done[-1]
    if not line.strip() or not line.startswith(partial) or any(d != line for d in done[-limit:]):
        return None
    return line[len(partial):] + b"\n"


def first_repeat(tail: bytes, pieces: Sequence[bytes], limit: int = MAX_SAME_LINES) -> int:
    """The index of the first piece (a token's bytes) that completes a refused line, else len(pieces)."""
    for index, piece in enumerate(pieces):
        rest = repeat_continuation(tail, limit)
        if rest is not None and piece.startswith(rest):
            return index
        tail = (tail + piece)[-TAIL_BYTES:]
    return len(pieces)


class TokenPrefixes:
    """Which tokens' bytes begin with given bytes (a sorted index, built once per tokenizer)."""

    def __init__(self, pieces: Sequence[bytes]):
        self.sorted = sorted((p, i) for i, p in enumerate(pieces) if p)
        self.keys = [p for p, _ in self.sorted]

    def starting_with(self, prefix: bytes) -> list[int]:
        at = bisect_left(self.keys, prefix)
        found = []
        while at < len(self.keys) and self.keys[at].startswith(prefix):
            found.append(self.sorted[at][1])
            at += 1
        return found

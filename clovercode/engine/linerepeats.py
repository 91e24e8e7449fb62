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
"""

from __future__ import annotations

from bisect import bisect_left
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


def first_repeat(tail: bytes, pieces: Sequence[bytes], limit: int = MAX_REPEATS) -> int:
    """The index of the first piece (a token's bytes) that completes a refused line, else len(pieces)."""
    for index, piece in enumerate(pieces):
        rest = repeat_continuation(tail, limit)
        if rest is not None and completes(piece, rest):
            return index
        tail = (tail + piece)[-TAIL_BYTES:]
    return len(pieces)


class TokenPrefixes:
    """Which tokens' bytes begin with given bytes (a sorted index, built once per tokenizer)."""

    def __init__(self, pieces: Sequence[bytes]):
        self.pieces = list(pieces)
        self.sorted = sorted((p, i) for i, p in enumerate(pieces) if p)
        self.keys = [p for p, _ in self.sorted]
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

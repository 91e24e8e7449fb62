"""Where generation stops: EOS tokens, stop strings, the token limit; output trimmed exactly there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

Detokenize = Callable[[Sequence[int]], str]


@dataclass(frozen=True)
class Stops:
    eos_ids: frozenset[int] = frozenset()
    strings: tuple[str, ...] = ()
    keep_string: bool = True  # keep the stop string itself (a tool call keeps its </tool_call>)


@dataclass(frozen=True)
class Cut:
    tokens: list[int]  # the tokens kept (a token that straddles a stop string is kept whole)
    text: str  # the output text, trimmed exactly at the stop
    reason: str  # "stop" (EOS) | "stop_string" | "length"


def find_stop(tokens: Sequence[int], detok: Detokenize, stops: Stops, max_tokens: int | None = None) -> Cut | None:
    """The earliest stop in ``tokens`` (all final), or None when generation should go on."""
    limit = len(tokens)
    reason = None
    eos = next((i for i, t in enumerate(tokens) if t in stops.eos_ids), None)
    if eos is not None:
        limit, reason = eos, "stop"
    if max_tokens is not None and (max_tokens < limit or (reason is None and max_tokens <= limit)):
        limit, reason = max_tokens, "length"
    kept = list(tokens[:limit])
    text = detok(kept)
    hit = _first_string(text, stops.strings)
    if hit is not None:
        index, stop = hit
        end = index + len(stop) if stops.keep_string else index
        return Cut(kept[:_tokens_covering(kept, detok, index + len(stop))], text[:end], "stop_string")
    if reason is None:
        return None
    return Cut(kept, text, reason)


def _first_string(text: str, strings: Sequence[str]) -> tuple[int, str] | None:
    found = [(text.find(s), s) for s in strings if s and s in text]
    return min(found) if found else None


def _tokens_covering(tokens: list[int], detok: Detokenize, chars: int) -> int:
    """The fewest leading tokens whose text reaches ``chars`` characters (binary search)."""
    low, high = 0, len(tokens)
    while low < high:
        mid = (low + high) // 2
        if len(detok(tokens[:mid])) >= chars:
            high = mid
        else:
            low = mid + 1
    return low


def safe_prefix(text: str, stops: Stops) -> str:
    """The part of ``text`` that can be shown now: no trailing partial UTF-8 character, and (when stop
    strings are dropped from the output) no tail that might be the start of a stop string."""
    end = len(text)
    while end and text[end - 1] == "\ufffd":
        end -= 1
    if not stops.keep_string:
        for stop in stops.strings:
            for size in range(min(len(stop) - 1, end), 0, -1):
                if text[:end].endswith(stop[:size]):
                    end -= size
                    break
    return text[:end]


WINDOW = 8  # tokens of context before the new ones; past this the window restarts at the last read point


class StopScanner:
    """The stop check of :func:`find_stop`, run as the final tokens grow, on the new tokens only.

    ``extend`` takes the tokens that just became final and returns the Cut that :func:`find_stop`
    returns for all final tokens so far, or None, checking what can have changed: EOS among the new
    ids, the token count, and stop strings in a bounded tail of text (the last characters a stop
    string could start in, and the new text). The text grows by detokenizing one short window per
    check — a few tokens already read, as context, and the new ones — so a check costs the same at
    4,096 tokens as at 40. Whenever a stop may have been found, the exact cut comes from
    :func:`find_stop` over all final tokens: once per generation, so the Cut is always the one the
    full rule gives. ``text`` (complete characters only) is what streaming shows."""

    def __init__(self, detok: Detokenize, stops: Stops, max_tokens: int | None = None):
        self.detok, self.stops, self.max_tokens = detok, stops, max_tokens
        self.tokens: list[int] = []
        self.text = ""  # the text of tokens[:_read]
        self._read = 0
        self._last = 0  # the read point before _read: where the next window restarts
        self._anchor = 0  # the window starts here
        self._anchor_chars = 0  # the length of the window's text up to _read
        self._reach = max((len(s) for s in stops.strings), default=0)

    def extend(self, new: Sequence[int]) -> Cut | None:
        if not new:
            return None
        self.tokens.extend(new)
        limited = self.max_tokens is not None and len(self.tokens) >= self.max_tokens
        if limited or not self.stops.eos_ids.isdisjoint(new):
            return find_stop(self.tokens, self.detok, self.stops, self.max_tokens)
        window = self.detok(self.tokens[self._anchor:])
        added = window[self._anchor_chars:]
        if self._reach:
            tail = self.text[max(0, len(self.text) - self._reach + 1):] + added
            if _first_string(tail, self.stops.strings) is not None:
                cut = find_stop(self.tokens, self.detok, self.stops, self.max_tokens)
                if cut is not None:
                    return cut
        if added.endswith("\ufffd"):
            # A character still split across tokens: read it with the tokens that complete it. (Invalid
            # bytes at the end of every check would keep the window growing: exact, only slower.)
            return None
        self.text += added
        self._last, self._read, self._anchor_chars = self._read, len(self.tokens), len(window)
        if self._read - self._anchor > WINDOW:
            # Restart at the previous read point, not at the new one: a window's first token can
            # decode differently alone (a leading space, a split character), so it keeps one read of
            # context, and the length of that context's text is measured in the same way.
            self._anchor = self._last
            self._anchor_chars = len(self.detok(self.tokens[self._anchor:self._read]))
        return None

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

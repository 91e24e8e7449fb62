"""Render ranked definitions as a compact outline (file → signatures) that fits a token budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from clovercode.context.rank import RankedDef
from clovercode.context.tokens import TokenCounter

MIN_TOKENS_PER_DEF = 3  # a line number, a keyword and a name: no definition renders shorter


@dataclass(frozen=True)
class FittedMap:
    text: str
    tokens: int
    shown: int  # definitions shown
    files: int  # files shown


def render_outline(ranked: Sequence[RankedDef], count: int) -> str:
    """The best ``count`` definitions, grouped by file (best file first), in line order within a file."""
    by_file: dict[str, list[RankedDef]] = {}
    for item in ranked[:count]:
        by_file.setdefault(item.rel, []).append(item)
    blocks = []
    for rel, items in by_file.items():
        lines = [f"{rel}:"]
        for item in sorted(items, key=lambda r: r.definition.line):
            lines.append(f"{item.definition.line:>5}: {item.definition.signature}")
        blocks.append("\n".join(lines))
    return "\n".join(blocks) + ("\n" if blocks else "")


def max_definitions(budget: int) -> int:
    """No outline within ``budget`` tokens can show more definitions than this."""
    return max(0, budget) // MIN_TOKENS_PER_DEF + 1


def fit_outline(ranked: Sequence[RankedDef], budget: int, count_tokens: TokenCounter) -> FittedMap:
    """The largest outline of the best definitions whose token count stays within ``budget``.

    More definitions never make the text shorter, so the count is monotone: probe 16, 32, 64, … until
    one is over, then binary-search below it. The probes stay within twice the answer, so a lazily
    fetched ``ranked`` only fetches the definitions of the files that can make it into the map."""
    if budget <= 0 or not ranked:
        return FittedMap("", 0, 0, 0)
    limit = min(len(ranked), max_definitions(budget))
    best = FittedMap("", 0, 0, 0)

    def fits(count: int) -> bool:
        nonlocal best
        text = render_outline(ranked, count)
        tokens = count_tokens(text)
        if tokens > budget:
            return False
        if count >= best.shown:
            best = FittedMap(text, tokens, count, len({r.rel for r in ranked[:count]}))
        return True

    low, high = 0, limit  # invariant: `low` fits (or is 0); the answer is in [low, high]
    probe = 16
    while probe < limit and fits(probe):
        low, probe = probe, probe * 2
    high = min(probe, limit) if probe < limit else limit
    if high == limit and high > low and fits(high):
        return best
    high -= 1
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    if low and best.shown != low:
        fits(low)
    return best

"""Find the text an edit replaces: exact first, then layered tolerant matching (trailing whitespace,
indentation, unicode punctuation). An ambiguous match is never applied; a missing one comes back
with the closest real lines. Pure functions over strings."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Callable, Sequence

from clovercode.actions.context import ToolError

_PUNCTUATION = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2015": "-", "\u2212": "-",
    "\u00a0": " ", "\u2007": " ", "\u202f": " ", "\u2009": " ", "\u200a": " ", "\u3000": " ",
    "\u2026": "...",
})


def _punctuation(line: str) -> str:
    return line.translate(_PUNCTUATION).strip()


# (name, per-line normaliser), strictest first.
LAYERS: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("exact", lambda line: line),
    ("trailing whitespace", str.rstrip),
    ("indentation", str.strip),
    ("unicode punctuation", _punctuation),
)


@dataclass(frozen=True)
class Replaced:
    text: str
    layer: str  # "exact" or the tolerance that found the match
    count: int = 1


def replace_text(text: str, old: str, new: str, shown: str, replace_all: bool = False) -> Replaced:
    """``text`` with ``old`` replaced by ``new``, or a ToolError written for the model."""
    starts = _occurrences(text, old)
    if replace_all:
        if not starts:
            raise ToolError(not_found_message(text, old, shown))
        return Replaced(text.replace(old, new), "exact", text.count(old))
    if len(starts) == 1:
        return Replaced(text[:starts[0]] + new + text[starts[0] + len(old):], "exact")
    if len(starts) > 1:
        numbers = ", ".join(str(text.count("\n", 0, s) + 1) for s in starts)
        raise ToolError(f"old_text occurs {len(starts)} times in {shown} (at lines {numbers}); include more "
                        "surrounding lines so it matches once, or set replace_all to true.")
    lines, old_lines, keep_newline = _split(text), _split(old), old.endswith("\n")
    if not any(line.strip() for line in old_lines):
        raise ToolError(not_found_message(text, old, shown))
    for name, norm in LAYERS[1:]:
        hits = find_windows(lines, old_lines, norm)
        if len(hits) > 1:
            numbers = ", ".join(str(h + 1) for h in hits)
            raise ToolError(f"old_text is not in {shown} exactly; ignoring {name} it matches {len(hits)} places "
                            f"(lines {numbers}), so nothing was changed. Copy the exact text from view_file, with "
                            "enough surrounding lines to match once.")
        if hits:
            first = hits[0]
            last = first + len(old_lines) - 1
            start = sum(len(line) + 1 for line in lines[:first])
            end = start + sum(len(line) + 1 for line in lines[first:last + 1]) - 1
            if keep_newline and end < len(text):
                end += 1
            adjusted = reindent(new, old_lines, lines[first:last + 1]) if name != "trailing whitespace" else new
            return Replaced(text[:start] + adjusted + text[end:], name)
    raise ToolError(not_found_message(text, old, shown))


def find_windows(lines: Sequence[str], target: Sequence[str], norm: Callable[[str], str],
                 start: int = 0, stop: int | None = None) -> list[int]:
    """Indexes i in [start, stop) where norm(lines[i + k]) == norm(target[k]) for every k."""
    size = len(target)
    stop = len(lines) - size + 1 if stop is None else min(stop, len(lines) - size + 1)
    wanted = [norm(t) for t in target]
    return [i for i in range(start, max(start, stop))
            if norm(lines[i]) == wanted[0] and all(norm(lines[i + k]) == wanted[k] for k in range(1, size))]


def reindent(new: str, old_lines: Sequence[str], file_lines: Sequence[str]) -> str:
    """Shift ``new`` by the indentation difference between what the model wrote and the file."""
    pairs = [(o, f) for o, f in zip(old_lines, file_lines) if o.strip()]
    if not pairs:
        return new
    model, real = (_indent(pairs[0][0]), _indent(pairs[0][1]))
    if model == real:
        return new
    out = []
    for line in new.split("\n"):
        if not line.strip():
            out.append(line)
        elif real.startswith(model):
            out.append(real[len(model):] + line)
        elif model.startswith(real) and line.startswith(model[len(real):]):
            out.append(line[len(model) - len(real):])
        else:
            return new  # mixed tabs and spaces: leave the model's text alone
    return "\n".join(out)


def not_found_message(text: str, old: str, shown: str) -> str:
    base = f"old_text was not found in {shown}"
    near = closest_lines(_split(text), _split(old))
    if near is None:
        return f"{base}. View the file and copy the text exactly, including indentation."
    first, block, similarity = near
    return (f"{base}. Did you mean lines {first}-{first + len(block) - 1} ({similarity:.0%} similar)?\n"
            + number_lines(block, first) + "\nCopy the text exactly as it is in the file, including indentation.")


def closest_lines(lines: Sequence[str], target: Sequence[str], cutoff: float = 0.5) -> tuple[int, list[str], float] | None:
    """(1-based first line, the lines, similarity) of the window of ``lines`` most like ``target``."""
    size = max(1, len(target))
    if not lines or not any(t.strip() for t in target):
        return None
    wanted = "\n".join(t.strip() for t in target)
    stripped = [line.strip() for line in lines]
    starts = range(max(1, len(lines) - size + 1))
    if len(lines) > 3000:  # large files: only windows whose first line resembles the target's first line
        anchor = next(t.strip() for t in target if t.strip())
        offset = next(i for i, t in enumerate(target) if t.strip())
        close = set(difflib.get_close_matches(anchor, stripped, n=10, cutoff=0.6))
        starts = [max(0, i - offset) for i, s in enumerate(stripped) if s in close]
    best: tuple[float, int] | None = None
    for i in starts:
        window = "\n".join(stripped[i:i + size])
        matcher = difflib.SequenceMatcher(None, window, wanted, autojunk=False)
        if best is not None and matcher.real_quick_ratio() <= best[0]:
            continue
        if best is not None and matcher.quick_ratio() <= best[0]:
            continue
        score = matcher.ratio()
        if best is None or score > best[0]:
            best = (score, i)
    if best is None or best[0] < cutoff:
        return None
    return best[1] + 1, list(lines[best[1]:best[1] + size]), best[0]


def number_lines(lines: Sequence[str], first: int) -> str:
    width = len(str(first + len(lines) - 1))
    return "\n".join(f"{n:>{width}}\t{line}" for n, line in enumerate(lines, first))


def _occurrences(text: str, needle: str) -> list[int]:
    found, start = [], 0
    while (index := text.find(needle, start)) != -1:
        found.append(index)
        start = index + 1
    return found


def _split(text: str) -> list[str]:
    """Lines without their "\n"; a final newline does not make an extra empty line."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]

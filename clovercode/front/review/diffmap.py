"""Which lines of a pull request's diff may carry a review comment (pure).

GitHub accepts a line comment (side RIGHT) only on a line its diff shows on the new side: an added
line or a context line inside a hunk. Anything else is answered 422, so a finding elsewhere goes into
the review's summary instead. A multi-line comment must start and end inside the same hunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(?P<start>\d+)(?:,(?P<count>\d+))? @@")


@dataclass
class DiffMap:
    # path -> list of hunks, each the set of new-side line numbers it shows
    hunks: dict[str, list[set[int]]] = field(default_factory=dict)

    @property
    def files(self) -> list[str]:
        return sorted(self.hunks)

    def hunk_of(self, path: str, line: int) -> set[int] | None:
        for lines in self.hunks.get(path, []):
            if line in lines:
                return lines
        return None

    def commentable(self, path: str, start: int, end: int) -> bool:
        """Can a comment span ``start``..``end`` of ``path``? (both ends in one hunk)"""
        lines = self.hunk_of(path, end)
        return lines is not None and start in lines


def parse_diff(text: str) -> DiffMap:
    """A ``git diff`` (unified, any context) → the new-side lines of each hunk, per new path."""
    out = DiffMap()
    path: str | None = None
    current: set[int] | None = None
    line = 0
    for raw in text.split("\n"):
        if raw.startswith("diff --git "):
            path, current = None, None
            continue
        if raw.startswith("+++ "):
            target = raw[4:].rstrip("\t")
            path = None if target == "/dev/null" else _unquote(target).removeprefix("b/")
            current = None
            continue
        if raw.startswith("--- ") and current is None:
            continue
        match = HUNK.match(raw)
        if match and path is not None:
            current = set()
            out.hunks.setdefault(path, []).append(current)
            line = int(match.group("start"))
            continue
        if current is None:
            continue
        if raw.startswith("+") or raw.startswith(" "):
            current.add(line)
            line += 1
        elif raw.startswith("\\"):  # "\ No newline at end of file"
            continue
        elif not raw.startswith("-"):
            current = None
    return out


def _unquote(name: str) -> str:
    """git quotes a path with unusual characters: "b/a\\tb" (C escapes)."""
    if len(name) >= 2 and name[0] == name[-1] == '"':
        return name[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")
    return name

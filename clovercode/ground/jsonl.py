"""JSON Lines, read the same way everywhere (replays, trajectories, saved sessions, suites)."""

from __future__ import annotations

import json
from typing import Any, Iterator

from clovercode.ground.errors import CloverError


def json_objects(text: str, where: str, error: type[CloverError], *, skip_bad: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of ``text``.

    A line that is not a JSON object raises ``error`` naming ``where:line`` — or, with ``skip_bad``,
    is skipped (a trajectory's torn last line after a crash must not make it unreadable).
    """
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if skip_bad:
                continue
            raise error(f"{where}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            if skip_bad:
                continue
            raise error(f"{where}:{number}: each line must be a JSON object")
        yield number, obj

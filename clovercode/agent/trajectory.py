"""Trajectories: every run's events as JSON Lines, one object per line, replayable.

Each line is ``{"kind": ..., "t": seconds since the run started, ...data}``. ``text_delta`` events
are not written (the whole turn is in ``model_turn.raw``). A trajectory plays back directly with
``--model replay:FILE``; :func:`to_replay` turns one into a minimal replay file.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import secrets
import time
from pathlib import Path
from typing import IO, Any, Iterator

# The kinds and a turn's replay text live below the agent (a replay backend reads them); importable here too.
from clovercode.backends.replay import turn_text
from clovercode.ground.attemptlog import published_attempt
from clovercode.ground.errors import ConfigError, UsageError
from clovercode.ground.events import NON_TURN_KINDS, SKIPPED_KINDS  # noqa: F401
from clovercode.ground.jsonl import json_objects
from clovercode.ground.privatefiles import open_private, private_dir


def new_trajectory_path(directory: Path, label: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:40] or "run"
    return directory / f"{stamp}-{slug}-{secrets.token_hex(3)}.jsonl"


class TrajectoryWriter:
    """An EventSink that appends each event to a JSONL file as it happens (a crash keeps the prefix)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            private_dir(path.parent)
            self._handle: IO[str] = open_private(path, "a")
        except OSError as exc:
            raise ConfigError(f"cannot write the trajectory {path}: {exc.strerror or exc}",
                              hint="Set trajectory_dir (CLOVERCODE_TRAJECTORY_DIR) to a writable directory.") from None
        self._start = time.monotonic()

    def emit(self, kind: str, **data: Any) -> None:
        if kind in SKIPPED_KINDS:
            return
        record = {"kind": kind, "t": round(time.monotonic() - self._start, 4), **data}
        self._handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read trajectory {path}: {getattr(exc, 'strerror', None) or exc}") from None
    for _, event in json_objects(text, str(path), UsageError):
        yield event


def to_replay(path: Path, attempt: int | None = None) -> list[dict[str, Any]]:
    """The model turns of a trajectory as replay lines: ``{"text": ..., "usage": {...}}``. For a
    ``fix --attempts`` run's events file, those of its attempt ``attempt`` (default: the chosen one)."""
    nested = published_attempt(path, attempt)
    if nested is not None:
        path = nested
    elif attempt is not None:
        raise UsageError(f"{path} is not a `fix --attempts` run with an attempt {attempt}",
                         hint="--attempt takes the events file of a `fix --attempts N` run (fix-attempts-….jsonl).")
    turns = []
    for event in read_events(path):
        if event.get("kind") == "model_turn":
            usage = event.get("usage") or {}
            turns.append({"text": turn_text(event),
                          "usage": {"prompt_tokens": usage.get("prompt_tokens", 0),
                                    "completion_tokens": usage.get("completion_tokens", 0)}})
    if not turns:
        raise UsageError(f"{path} holds no model turns to replay")
    return turns

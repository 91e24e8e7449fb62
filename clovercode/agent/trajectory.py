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

from clovercode.errors import ConfigError, UsageError
from clovercode.jsonl import json_objects
from clovercode.privatefiles import open_private, private_dir
from clovercode.toolcalls.render import render_call

SKIPPED_KINDS = {"text_delta", "subagent_progress"}  # a child's live line; its own trajectory has the detail
# Every kind a trajectory may hold besides ``model_turn``: a replay skips these and refuses any other
# kind, so a typo'd or foreign line is an error rather than a silently dropped turn. A new event kind
# must be added here (tests/test_trajectory.py checks every kind the code emits is listed).
NON_TURN_KINDS = frozenset({"run_start", "step_start", "tool_call", "observation", "format_error", "warning",
                            "context", "conversation", "run_end", "test_run", "fix_result", "hook", "plan",
                            "subagent_started", "subagent_progress", "subagent_completed"})


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


def turn_text(event: dict[str, Any]) -> str:
    """A ``model_turn``'s text as a replay plays it: the raw text, then the calls a server parsed
    out of it (they are not in ``raw``), written in the XML form the parser reads."""
    calls = [render_call(c["name"], c.get("arguments") or {}) for c in event.get("server_calls") or ()]
    return "\n".join([event.get("raw", ""), *calls]) if calls else event.get("raw", "")


def to_replay(path: Path) -> list[dict[str, Any]]:
    """The model turns of a trajectory as replay lines: ``{"text": ..., "usage": {...}}``."""
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

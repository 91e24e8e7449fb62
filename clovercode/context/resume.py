"""Saved sessions: every run's trajectory holds a ``conversation`` event just before its ``run_end``
(the whole history and the project root); ``clovercode --resume [ID]`` loads it back. A trajectory cut short by a crash has no
such event; its conversation is rebuilt from the run's own events."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from clovercode.ground.attemptlog import NESTED_GLOB
from clovercode.ground.events import EventSink
from clovercode.ground.messages import CallRecord, Message
from clovercode.ground.conversation import Conversation
from clovercode.ground.errors import UsageError
from clovercode.ground.jsonl import json_objects

SNAPSHOT = "conversation"
SEARCH_LIMIT = 200  # newest trajectories looked at when no ID is given


@dataclass
class SavedSession:
    path: Path
    root: str | None
    messages: list[Message]
    session: str | None = None  # the REPL session this run belongs to (its first trajectory's id)

    @property
    def id(self) -> str:
        return self.path.stem

    @property
    def session_id(self) -> str:
        return self.session or self.path.stem

    @property
    def goal(self) -> str:
        goals = [m.content for m in self.messages if "goal" in m.tags]
        return goals[-1].split("\n")[0] if goals else ""


class SnapshotBeforeEnd:
    """An EventSink in front of the trajectory writer: writes the ``conversation`` snapshot just
    before the run's ``run_end`` (which stays the last event), when the history is complete."""

    def __init__(self, inner: EventSink, root: Path, conversation: Conversation, session: str | None = None):
        self.inner, self.root, self.conversation, self.session = inner, root, conversation, session

    def emit(self, kind: str, **data: Any) -> None:
        if kind == "run_end":
            extra = {"session": self.session} if self.session else {}
            self.inner.emit(SNAPSHOT, root=str(self.root), messages=[m.to_json() for m in self.conversation.messages],
                            **extra)
        self.inner.emit(kind, **data)


def _events(path: Path) -> Iterator[dict[str, Any]]:
    """The trajectory's events; a torn last line (a crash mid-write) is ignored, not fatal."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read saved session {path}: {exc}") from None
    for _, event in json_objects(text, str(path), UsageError, skip_bad=True):
        yield event


def load_saved(path: Path) -> SavedSession:
    snapshot: dict[str, Any] | None = None
    events = list(_events(path))
    for event in events:
        if event.get("kind") == SNAPSHOT:
            snapshot = event
    try:
        if snapshot is not None:
            return SavedSession(path, snapshot.get("root"), [Message.from_json(m) for m in snapshot.get("messages", [])],
                                snapshot.get("session"))
        return SavedSession(path, None, rebuild(events))
    except (KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"saved session {path} is damaged ({exc})") from None


def rebuild(events: list[dict[str, Any]]) -> list[Message]:
    """The conversation of one run from its events (what a crash left behind)."""
    messages: list[Message] = []
    last_observation = None
    for event in events:
        kind = event.get("kind")
        if kind == "run_start":
            messages.append(Message("user", event.get("task", ""), tags=frozenset({"goal"})))
        elif kind == "model_turn":
            calls = tuple(CallRecord(c["id"], c["name"], dict(c.get("arguments") or {})) for c in event.get("calls") or ())
            messages.append(Message("assistant", event.get("content", ""), event.get("reasoning", ""), calls))
        elif kind == "observation":
            last_observation = event.get("text", "")
            messages.append(Message("tool", last_observation, tool_call_id=event.get("id"), name=event.get("name")))
        elif kind == "format_error" and event.get("text") and event.get("text") != last_observation:
            messages.append(Message("user", event["text"], tags=frozenset({"feedback"})))
    return messages


def saved_paths(directory: Path) -> list[Path]:
    """Every trajectory a session may be resumed from, newest name first: those in ``directory``, then
    the attempts' nested under a ``fix --attempts`` run (ground/attemptlog.py)."""
    if not directory.is_dir():
        return []
    return sorted(directory.glob("*.jsonl"), reverse=True) + sorted(directory.glob(NESTED_GLOB), reverse=True)


def find_saved(directory: Path, ident: str | None, root: Path) -> Path:
    """The trajectory to resume: ``ident`` (a path, an ID or a unique part of one), or the newest
    saved session of project ``root``."""
    if ident and Path(ident).expanduser().is_file():
        return Path(ident).expanduser()
    candidates = saved_paths(directory)
    if ident:
        exact = [p for p in candidates if p.stem == ident or p.name == ident]
        matches = exact or [p for p in candidates if ident in p.stem]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise UsageError(f"--resume {ident!r} matches {len(matches)} saved sessions",
                             hint="Give more of the ID:\n" + "\n".join(f"  {p.stem}" for p in matches[:10]))
        raise UsageError(f"no saved session matches {ident!r} in {directory}", hint=_recent_hint(candidates))
    for path in candidates[:SEARCH_LIMIT]:
        try:
            saved = load_saved(path)
        except UsageError:
            continue
        if saved.root == str(root) and saved.messages:
            return path
    raise UsageError(f"no saved session for {root} in {directory}", hint=_recent_hint(candidates))


def _recent_hint(candidates: list[Path]) -> str:
    if not candidates:
        return "Sessions are saved when a task runs; none has been saved yet."
    return "Recent sessions (resume one with --resume ID):\n" + "\n".join(f"  {p.stem}" for p in candidates[:5])

"""Saved sessions as an editor manages them: ``session/list`` (paged), the one ``session/load`` and
``session/resume`` continue, ``session/delete``. They are the sessions ``clovercode --resume`` and
``clovercode sessions`` list (sessions.py), read from the same trajectories.

A session id comes from the client, so it is checked before it names a file: the id a trajectory
has (its file name without ``.jsonl``), never a path, and matched exactly, never as a part.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import re
from dataclasses import dataclass
from pathlib import Path

from clovercode.context.resume import SavedSession, load_saved
from clovercode.ground.errors import UsageError
from clovercode.wiring.sessions import SessionInfo, list_sessions

PAGE_SIZE = 50
TITLE_CHARS = 100
SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")


class SessionNotFound(UsageError):
    """No saved session by that id: ACP's "resource not found" (-32002), which clients treat as
    done for session/close and session/delete."""


@dataclass(frozen=True)
class Page:
    sessions: list[dict[str, str]]
    next_cursor: str | None


def check_id(ident: str) -> str:
    if not SESSION_ID.match(ident) or ident.endswith(".jsonl"):
        raise UsageError(f"{ident[:80]!r} is not a clovercode session id (session/list gives them)")
    return ident


def title_of(info: SessionInfo) -> str:
    first = " ".join(info.first_task.split())
    return first[:TITLE_CHARS] + ("…" if len(first) > TITLE_CHARS else "") if first else info.id


def updated_at(modified: float) -> str:
    return datetime.datetime.fromtimestamp(modified, datetime.timezone.utc).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


def page(directory: Path, root: Path | None, cursor: str | None) -> Page:
    """One page of the sessions of ``root`` (every project's when None), newest first.

    The cursor names the last session shown, by its time and id, not by its place in the list: a
    session saved while the editor pages comes first and does not push an item of the last page onto
    the next one again (an offset did, issue 49)."""
    order = sorted(list_sessions(directory, root), key=lambda info: (-info.modified, info.id))
    if cursor is not None:
        after = _read_cursor(cursor)
        order = [info for info in order if (-info.modified, info.id) > after]
    shown = order[:PAGE_SIZE]
    rows = [{"sessionId": info.id, "cwd": info.saved.root or str(root or ""), "title": title_of(info),
             "updatedAt": updated_at(info.modified)} for info in shown]
    rows = [row for row in rows if row["cwd"]]  # a session from before roots were saved has no project to show
    more = len(order) > PAGE_SIZE
    return Page(rows, _cursor(shown[-1].modified, shown[-1].id) if more else None)


def _cursor(modified: float, ident: str) -> str:
    return base64.urlsafe_b64encode(f"v1 {modified!r} {ident}".encode()).decode().rstrip("=")


def _read_cursor(cursor: str) -> tuple[float, str]:
    wrong = UsageError("the cursor is not one session/list gave (pass nextCursor back as it came)")
    if len(cursor) > 400:
        raise wrong
    try:
        version, modified, ident = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().split(" ")
        when = float(modified)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise wrong from None
    if version != "v1" or not SESSION_ID.match(ident) or when != when:  # NaN compares with nothing
        raise wrong
    return -when, ident


def find(directory: Path, ident: str, root: Path) -> SavedSession:
    """The newest trajectory of session ``ident`` of project ``root``, with a message an editor user
    can act on when it is missing or belongs to another project."""
    check_id(ident)
    saved = next((info.saved for info in list_sessions(directory, None) if info.id == ident), None)
    if saved is None:
        path = directory / f"{ident}.jsonl"
        if not path.is_file():
            raise SessionNotFound(f"no saved session {ident}", hint=f"The sessions are kept in {directory}; "
                             "session/list shows those of this project.")
        saved = load_saved(path)
        if saved.session_id != ident:
            raise UsageError(f"no saved session {ident}: {path.name} is part of session {saved.session_id}")
    if saved.root and saved.root != str(root):
        raise UsageError(f"session {ident} belongs to another project, {saved.root}",
                         hint=f"Open {saved.root} in the editor to continue it there.")
    if not saved.messages:
        raise UsageError(f"saved session {ident} holds no conversation to continue")
    return saved


def delete(directory: Path, ident: str) -> int:
    """Delete every trajectory of session ``ident``; how many. A session nobody saved is an error."""
    check_id(ident)
    removed = 0
    for path in sorted(directory.glob("*.jsonl")) if directory.is_dir() else []:
        if path.is_symlink() or not path.is_file():
            continue
        if path.stem != ident:
            try:
                if load_saved(path).session_id != ident:
                    continue
            except UsageError:
                continue
        path.unlink()
        removed += 1
    if not removed:
        raise SessionNotFound(f"no saved session {ident} to delete")
    return removed

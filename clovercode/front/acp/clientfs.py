"""The file tools' FileAccess inside an editor: reads and writes go to the client's buffers
(``fs/read_text_file``, ``fs/write_text_file``), so the model sees unsaved edits and its own edits
land where the person is looking. Paths arrive already resolved inside the project and checked by
the guards (actions/editing.py, actions/files.py), and are resolved once more by the project view
(trust/projectview.py) before one is sent to the editor: the editor opens what it is told, links
included, so only a path beneath the root with no link on its way leaves here. The disk (through
the same view) still decides whether a file exists, and deletes (which ACP has no method for)
happen there.

:class:`WriteLog` wraps either access and keeps, per written file, the text before and after, so a
tool call's update can carry an ACP diff (old and new text, which a unified diff cannot give back).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from clovercode.actions.context import ToolError
from clovercode.actions.fileio import MAX_FILE_BYTES, DiskFiles, FileAccess, TextFile, decode, digest
from clovercode.trust.projectview import OutsideProject, ProjectView

# call(method, **params): one request to the client, answered (outbox.Outbox.call)
ClientCall = Callable[..., Any]


class ClientFiles:
    def __init__(self, call: ClientCall, session_id: str, disk: DiskFiles | None = None):
        self.call, self.session_id = call, session_id
        self.disk = disk or DiskFiles()

    def bind(self, view: ProjectView) -> None:
        self.disk.bind(view)

    def _client_path(self, path: Path) -> str:
        """The path the editor is given: resolved beneath the root by the view, or OutsideProject."""
        return str(self.disk._view().resolve(path))

    def read(self, path: Path, shown: str) -> TextFile:
        try:
            where = self._client_path(path)
        except OutsideProject:
            raise ToolError(f"'{shown}' leads outside the project (through a link); only files inside it can be used.") from None
        kind = self.disk._view().kind(where)
        if kind == "dir":
            raise ToolError(f"'{shown}' is a directory; use list_files to see what it contains.")
        if kind is None:
            raise ToolError(f"'{shown}' does not exist. Use list_files or search_text to find the right path.")
        on_disk = self.disk.read(Path(where), shown)  # binary, oversized and secret files are refused as on disk
        try:
            text = self.call("read_text_file", session_id=self.session_id, path=where).content
        except Exception as exc:  # the editor could not open it: say so to the model, do not crash the turn
            raise ToolError(f"'{shown}' cannot be read from the editor: {_reason(exc)}.") from None
        data = text.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            raise ToolError(f"'{shown}' is {len(data)} bytes, too large to open (limit {MAX_FILE_BYTES}).")
        if decode(data) is None:
            raise ToolError(f"'{shown}' is a binary file; only text files can be viewed or edited.")
        # The buffer is text: the editor owns its encoding on save. Line endings are kept as in it.
        newline = "\n"
        crlf = text.count("\r\n")
        if crlf and crlf == text.count("\n"):
            text, newline = text.replace("\r\n", "\n"), "\r\n"
        return TextFile(text, "utf-8", newline, b"", digest(data), on_disk.mode)

    def write(self, path: Path, data: bytes, mode: int | None) -> None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:  # a file kept in another encoding: the editor cannot take bytes
            self.disk.write(path, data, mode)
            return
        where = self._client_path(path)
        try:
            self.call("write_text_file", session_id=self.session_id, path=where, content=text)
        except Exception as exc:
            raise OSError(f"the editor refused the write: {_reason(exc)}") from None

    def delete(self, path: Path) -> None:
        self.disk.delete(path)


def _reason(exc: Exception) -> str:
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return message.splitlines()[0][:200]


@dataclass(frozen=True)
class Written:
    path: Path
    old_text: str | None  # None: the file was created
    new_text: str


class WriteLog:
    """A FileAccess that remembers what each write replaced (for the diffs an editor shows)."""

    def __init__(self, inner: FileAccess):
        self.inner = inner
        self.view: ProjectView | None = None
        self.seen: dict[Path, str] = {}  # the last text read or written of each file
        self.written: list[Written] = []
        self.lock = threading.Lock()

    def bind(self, view: ProjectView) -> None:
        self.view = view
        bind = getattr(self.inner, "bind", None)
        if bind is not None:
            bind(view)

    def read(self, path: Path, shown: str) -> TextFile:
        current = self.inner.read(path, shown)
        with self.lock:
            self.seen[path] = current.text
        return current

    def write(self, path: Path, data: bytes, mode: int | None) -> None:
        # Every edit reads the file just before writing it (read-before-edit), so ``seen`` is current.
        exists = self.view.kind(path) is not None if self.view is not None else path.exists()
        old = self.seen.get(path) if exists else None
        self.inner.write(path, data, mode)
        decoded = decode(data)
        new = decoded[0].replace("\r\n", "\n") if decoded else ""
        with self.lock:
            self.seen[path] = new
            self.written.append(Written(path, old, new))

    def delete(self, path: Path) -> None:
        self.inner.delete(path)
        with self.lock:
            self.seen.pop(path, None)

    def take(self) -> list[Written]:
        with self.lock:
            written, self.written = self.written, []
        return written

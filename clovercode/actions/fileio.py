"""Reading and writing project files safely: text only, encoding, BOM and line endings kept, writes
atomic with the file's mode and owner preserved.

The file tools reach files through a :class:`FileAccess` (``ToolContext.files``): :class:`DiskFiles`
here, or an editor's buffers when clovercode runs inside one (clovercode/front/acp/clientfs.py). Paths
reach it already resolved inside the project and checked by the guards; on disk every byte still
goes through the project view (trust/projectview.py), which resolves each path again beneath the root."""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from clovercode.actions.toolerror import ToolError
from clovercode.trust.projectview import OutsideProject, ProjectView, SecretPath, current_umask, pid_alive

MAX_FILE_BYTES = 4 * 1024 * 1024
TEMP_SUFFIX = ".clovercode-tmp"
_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
_TEXT_CONTROLS = set(b"\t\n\r\f\v\b\x1b")


@dataclass(frozen=True)
class TextFile:
    text: str  # with "\n" line endings when the file uses CRLF throughout; else as in the file
    encoding: str = "utf-8"
    newline: str = "\n"  # what "\n" in ``text`` becomes on disk
    bom: bytes = b""
    digest: str = ""  # sha256 of the bytes on disk, for change detection
    mode: int | None = None

    def encode(self, text: str, shown: str) -> bytes:
        """``text`` in this file's format (encoding, BOM, line endings)."""
        if self.newline == "\r\n":
            text = text.replace("\r\n", "\n").replace("\n", "\r\n")
        try:
            return self.bom + text.encode(self.encoding)
        except UnicodeEncodeError as exc:
            bad = text[exc.start:exc.end]
            raise ToolError(f"{shown} is {self.encoding}-encoded and cannot hold {bad!r}; "
                            "write that character another way (e.g. an escape sequence).") from None


NEW_FILE = TextFile("")


class FileAccess(Protocol):
    """Where the file tools read and write a project file's text (listing and search stay on disk)."""

    def read(self, path: Path, shown: str) -> TextFile:
        ...

    def write(self, path: Path, data: bytes, mode: int | None) -> None:
        """``data``: the whole new file, encoded as the TextFile read (or created) says."""
        ...

    def delete(self, path: Path) -> None:
        ...


class DiskFiles:
    """The project's files on disk, through a project view (given, or bound by the ToolContext)."""

    def __init__(self, view: ProjectView | None = None):
        self.view = view

    def bind(self, view: ProjectView) -> None:
        if self.view is None:
            self.view = view

    def _view(self) -> ProjectView:
        if self.view is None:
            raise RuntimeError("DiskFiles used before a project view was bound")
        return self.view

    def read(self, path: Path, shown: str) -> TextFile:
        return read_text(self._view(), path, shown)

    def write(self, path: Path, data: bytes, mode: int | None) -> None:
        self._view().write_bytes(path, data, mode)

    def delete(self, path: Path) -> None:
        self._view().delete(path)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_text(view: ProjectView, path: Path | str, shown: str) -> TextFile:
    """A project file's text through ``view``; every refusal is a ToolError written for the model."""
    try:
        data = view.read_bytes(path, MAX_FILE_BYTES)
        info = view.stat(path)
    except OutsideProject:
        raise ToolError(f"'{shown}' leads outside the project (through a link); only files inside it can be used.") from None
    except SecretPath:
        raise ToolError(f"'{shown}' holds credentials or other secrets; clovercode does not read it.") from None
    except IsADirectoryError:
        raise ToolError(f"'{shown}' is a directory; use list_files to see what it contains.") from None
    except FileNotFoundError:
        raise ToolError(f"'{shown}' does not exist. Use list_files or search_text to find the right path.") from None
    except OSError as exc:
        raise ToolError(f"'{shown}' cannot be read: {exc.strerror}.") from None
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"'{shown}' is {max(info.st_size, len(data))} bytes, too large to open (limit {MAX_FILE_BYTES}).")
    decoded = decode(data)
    if decoded is None:
        raise ToolError(f"'{shown}' is a binary file; only text files can be viewed or edited.")
    text, encoding, bom = decoded
    newline = "\n"
    crlf = text.count("\r\n")
    if crlf and crlf == text.count("\n"):
        text, newline = text.replace("\r\n", "\n"), "\r\n"
    return TextFile(text, encoding, newline, bom, digest(data), info.st_mode & 0o7777)


def decode(data: bytes) -> tuple[str, str, bytes] | None:
    """(text, encoding, BOM), or None for binary data."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom):].decode(encoding), encoding, bom
            except UnicodeDecodeError:
                return None
    sample = data[:8192]
    if b"\x00" in sample:
        return None
    controls = sum(1 for byte in sample if byte < 0x20 and byte not in _TEXT_CONTROLS)
    if controls > len(sample) // 20:
        return None
    try:
        return data.decode("utf-8"), "utf-8", b""
    except UnicodeDecodeError:
        pass
    return data.decode("latin-1"), "latin-1", b""  # legacy 8-bit text: every byte round-trips


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write via a temp file in the same directory and rename over the target: a crash at any
    moment leaves either the old file or the new one, never half of one. Keeps the target's mode
    (or ``mode``) and, when we can, its owner. For clovercode's own files; project files are
    written by the project view."""
    try:
        info = path.stat()
    except FileNotFoundError:
        info = None
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(path)
    # The pid in the name lets a later write tell a dead writer's leftover from a live one's file.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}.", suffix=TEMP_SUFFIX,
                               dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is None:
            mode = info.st_mode & 0o7777 if info else 0o666 & ~current_umask()
        os.chmod(tmp, mode)
        if info is not None and (info.st_uid, info.st_gid) != (os.geteuid(), os.getegid()):
            try:
                os.chown(tmp, info.st_uid, info.st_gid)
            except PermissionError:
                pass  # not ours to give away: the file becomes ours, as any editor's save would
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _remove_stale_temps(path: Path) -> None:
    """Delete temp files of ``path`` left by a writer that was killed mid-write."""
    for leftover in path.parent.glob(f".{path.name}.*{TEMP_SUFFIX}"):
        parts = leftover.name[len(path.name) + 2:].split(".")
        if parts and parts[0].isdigit() and not pid_alive(int(parts[0])):
            try:
                leftover.unlink()
            except OSError:
                pass

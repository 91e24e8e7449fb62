"""Reading and writing project files safely: text only, encoding kept, writes atomic."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clovercode.actions.context import ToolError

MAX_FILE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class TextFile:
    text: str  # newlines as in the file
    encoding: str


def read_text(path: Path, shown: str) -> TextFile:
    if path.is_dir():
        raise ToolError(f"'{shown}' is a directory; use list_files to see what it contains.")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ToolError(f"'{shown}' does not exist. Use list_files or search_text to find the right path.") from None
    except OSError as exc:
        raise ToolError(f"'{shown}' cannot be read: {exc.strerror}.") from None
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"'{shown}' is {len(data)} bytes, too large to open (limit {MAX_FILE_BYTES}).")
    if b"\x00" in data[:8192]:
        raise ToolError(f"'{shown}' is a binary file; only text files can be viewed or edited.")
    encoding = "utf-8-sig" if data.startswith(b"\xef\xbb\xbf") else "utf-8"
    try:
        return TextFile(data.decode(encoding), encoding)
    except UnicodeDecodeError:
        return TextFile(data.decode("latin-1"), "latin-1")  # any byte sequence round-trips


def write_atomic(path: Path, text: str, encoding: str = "utf-8") -> None:
    """Write via a temp file in the same directory and rename over the target: a crash at any
    moment leaves either the old file or the new one, never half of one. Keeps the file's mode."""
    data = text.encode(encoding)
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".clovercode-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current

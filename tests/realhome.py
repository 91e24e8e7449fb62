"""The session-end check that a test run left the real home as it found it.

One walk at the end, none at the start: anything created, written, renamed, chmod-ed or deleted
changes the status-change time (ctime) of itself or of its directory, and a ctime cannot be set back
the way an mtime can. So "changed" is "ctime at or after the run began", under the home.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Watch:
    home: Path
    marker: Path  # a file outside the home whose mtime is the run's start, on the file system's clock


def watch(home: Path) -> Watch:
    """Begin a watch of ``home``; the marker lives in the temp directory, never in the home."""
    handle, name = tempfile.mkstemp(prefix="clovercode-home-watch-")
    os.close(handle)
    # File times come from a clock that ticks every few milliseconds: a change in the marker's own
    # tick has the marker's time, and "newer" is strict. One nanosecond back counts that tick in.
    made = os.stat(name)
    os.utime(name, ns=(made.st_atime_ns, made.st_mtime_ns - 1))
    return Watch(Path(home), Path(name))


def changed_since(watch: Watch, ignore: str = "") -> list[str]:
    """Paths under the home (relative, sorted) changed since ``watch`` began, less those matching an
    ``ignore`` glob (colon-separated, relative to the home; a directory's glob covers what is under it)."""
    try:
        since = watch.marker.stat().st_mtime_ns
    except OSError:
        return []
    try:
        found = _walk_find(watch) if shutil.which("find") else _walk_python(watch.home, since)
    finally:
        watch.marker.unlink(missing_ok=True)
    patterns = [p.strip("/") for p in ignore.split(":") if p.strip("/")]
    temp = Path(tempfile.gettempdir()).resolve()
    if temp.is_relative_to(watch.home.resolve()):  # TMPDIR in the home: the tests' own files are not a leak
        patterns.append(str(temp.relative_to(watch.home.resolve())))
    return sorted(path for path in found if not _ignored(path, patterns))


def _ignored(path: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(path, p) or path.startswith(p + "/") for p in patterns)


def _walk_find(watch: Watch) -> set[str]:
    # find is C: a home of a quarter of a million files takes about a second, Python about five.
    result = subprocess.run(["find", str(watch.home), "-xdev", "-cnewer", str(watch.marker), "-print0"],
                            capture_output=True, check=False)
    return {_relative(watch.home, raw.decode(errors="surrogateescape"))
            for raw in result.stdout.split(b"\0") if raw}


def _walk_python(home: Path, since: int) -> set[str]:
    found: set[str] = set()
    for root, dirs, files in os.walk(home):
        for name in [*dirs, *files, ""]:
            path = os.path.join(root, name) if name else root
            try:
                if os.lstat(path).st_ctime_ns >= since:
                    found.add(_relative(home, path))
            except OSError:
                continue
    return found


def _relative(home: Path, path: str) -> str:
    rel = os.path.relpath(path, home)
    return "." if rel == "." else rel

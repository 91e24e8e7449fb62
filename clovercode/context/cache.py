"""Per-file tag cache: one SQLite file per project in the cache directory, one row per source file,
keyed by path + mtime + size. Any damage to it costs a re-parse, never a failed map."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from pathlib import Path
from typing import Iterable, Mapping

CACHE_VERSION = "2"  # bump when the stored row format changes
Row = tuple[int, int, str, str]  # mtime_ns, size, tags as JSON, definitions as JSON


def default_cache_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")) / ".cache")
    return Path(base).expanduser() / "clovercode" / "tags"


def cache_file(cache_dir: Path, root: Path) -> Path:
    """The cache of project ``root``: readable name, unique by the root's full path."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", root.name)[:40] or "root"
    return cache_dir / f"{slug}-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}.sqlite"


class TagCache:
    """Rows of cached tags. ``path=None`` keeps nothing (used when caching is off or impossible)."""

    def __init__(self, path: Path | None, fingerprint: str):
        self.path = path
        self.version = f"{CACHE_VERSION}:{fingerprint}"
        self.problem = ""  # why the cache was rebuilt or disabled, for the map's stats line
        self._db: sqlite3.Connection | None = None
        if path is not None:
            self._db = self._open(path)

    def _open(self, path: Path) -> sqlite3.Connection | None:
        try:
            return self._connect(path)
        except sqlite3.DatabaseError as exc:  # not a database, malformed, locked beyond the timeout
            self.problem = f"cache {path} was unusable ({exc}); rebuilt"
        except OSError as exc:
            self.problem = f"cache directory unusable ({exc.strerror or exc}); running without a cache"
            return None
        if _remove(path):
            try:
                return self._connect(path)
            except (sqlite3.DatabaseError, OSError):
                pass
        self.problem = f"cache {path} cannot be used; running without a cache"
        return None

    def _connect(self, path: Path) -> sqlite3.Connection:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(path), timeout=5, isolation_level=None)
        try:
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            found = db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
            if found is None or found[0] != self.version:
                # Tags made by another row format or other queries would be wrong, not just old.
                db.execute("DROP TABLE IF EXISTS tags")
                db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (self.version,))
            db.execute("CREATE TABLE IF NOT EXISTS tags "
                       "(path TEXT PRIMARY KEY, mtime_ns INTEGER, size INTEGER, data TEXT, defs TEXT)")
        except BaseException:
            db.close()
            raise
        return db

    def load(self) -> dict[str, Row]:
        if self._db is None:
            return {}
        try:
            return {path: (mtime, size, data, defs) for path, mtime, size, data, defs in
                    self._db.execute("SELECT path, mtime_ns, size, data, defs FROM tags")}
        except sqlite3.DatabaseError as exc:
            self._fail(exc)
            return {}

    def store(self, rows: Iterable[tuple[str, int, int, str, str]], stale: Iterable[str] = ()) -> None:
        """Save new rows and forget files that are gone, in one transaction; failures only cost speed."""
        if self._db is None:
            return
        try:
            with _transaction(self._db):
                self._db.executemany("INSERT OR REPLACE INTO tags VALUES (?, ?, ?, ?, ?)", rows)
                self._db.executemany("DELETE FROM tags WHERE path = ?", ((p,) for p in stale))
        except sqlite3.DatabaseError as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        self.problem = f"cache {self.path} failed ({exc}); it will be rebuilt"
        self.close()
        if self.path is not None:
            _remove(self.path)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class _transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN")

    def __exit__(self, kind, value, tb) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")


def _remove(path: Path) -> bool:
    removed = True
    for candidate in (path, Path(f"{path}-journal"), Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            os.unlink(candidate)
        except FileNotFoundError:
            pass
        except OSError:
            removed = False
    return removed

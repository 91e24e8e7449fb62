"""Per-file tag cache: one SQLite file per project in the cache directory, one row per source file,
keyed by path + mtime + size + inode and by the content's digest (a file whose stat changed but whose
bytes did not, or a copy of another file, is not parsed again). Beside it, the project's ranking graph
(``graph.py``) for the tree it was built from. Any damage costs a re-parse, never a failed map."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from pathlib import Path
from typing import Iterable, Mapping

from clovercode.ground.privatefiles import make_private, private_dir
CACHE_VERSION = "3"  # bump when the stored row format changes
Key = tuple[int, int, int]  # mtime_ns, size, inode
Head = tuple[int, int, int, str, str]  # mtime_ns, size, inode, digest, tags without details (JSON)
DETAILS_BATCH = 500  # paths per SELECT (SQLite limits host parameters)


def default_cache_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")) / ".cache")
    return Path(base).expanduser() / "clovercode" / "tags"


def cache_file(cache_dir: Path, root: Path, variant: str = "") -> Path:
    """The cache of project ``root``: readable name, unique by the root's full path (and ``variant``)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", root.name)[:40] or "root"
    key = str(root) + (f"\0{variant}" if variant else "")
    return cache_dir / f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.sqlite"


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class TagCache:
    """Rows of cached tags. ``path=None`` keeps nothing (used when caching is off or impossible)."""

    def __init__(self, path: Path | None, fingerprint: str):
        self.path = path
        self.version = f"{CACHE_VERSION}:{fingerprint}"
        self.problem = ""  # why the cache was rebuilt or disabled, for the map's stats line
        self._db: sqlite3.Connection | None = None
        if path is not None:
            self._db = self._open(path)

    @property
    def usable(self) -> bool:
        return self._db is not None

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
        private_dir(path.parent)
        db = sqlite3.connect(str(path), timeout=5, isolation_level=None)
        make_private(path)  # before anything is written: SQLite gives its journal the database's mode
        try:
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            found = db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
            if found is None or found[0] != self.version:
                # Tags made by another row format or other queries would be wrong, not just old.
                db.execute("DROP TABLE IF EXISTS tags")
                db.execute("DELETE FROM meta WHERE key IN ('tree', 'summary', 'ranking')")
                db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (self.version,))
            db.execute("CREATE TABLE IF NOT EXISTS tags (path TEXT PRIMARY KEY, mtime_ns INTEGER, size INTEGER, "
                       "inode INTEGER, digest TEXT, data TEXT, defs TEXT)")
            db.execute("CREATE INDEX IF NOT EXISTS tags_digest ON tags (digest)")
        except BaseException:
            db.close()
            raise
        return db

    def meta(self, key: str) -> str:
        """A value kept beside the rows: ``tree`` (the fingerprint of the tree the rows and the saved
        graph were last brought up to date with), ``summary`` (JSON: definitions, skipped files) and
        ``ranking`` (JSON: the last ranking asked for, with its key)."""
        if self._db is None:
            return ""
        try:
            found = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as exc:
            self._fail(exc)
            return ""
        return found[0] if found else ""

    def put_meta(self, key: str, value: str) -> None:
        if self._db is None:
            return
        try:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
        except sqlite3.DatabaseError as exc:
            self._fail(exc)

    def heads(self, paths: list[str] | None = None) -> dict[str, Head]:
        """Rows without their details (signatures and lines: most of the bytes, rarely needed): every
        row, or those of ``paths``."""
        if self._db is None:
            return {}
        query = "SELECT path, mtime_ns, size, inode, digest, data FROM tags"
        try:
            if paths is None:
                return {path: (mtime, size, inode, dig, data) for path, mtime, size, inode, dig, data in
                        self._db.execute(query)}
            out = {}
            for start in range(0, len(paths), DETAILS_BATCH):
                chunk = paths[start:start + DETAILS_BATCH]
                for path, mtime, size, inode, dig, data in self._db.execute(
                        f"{query} WHERE path IN ({','.join('?' * len(chunk))})", chunk):
                    out[path] = (mtime, size, inode, dig, data)
            return out
        except sqlite3.DatabaseError as exc:
            self._fail(exc)
            return {}

    def paths(self) -> list[str]:
        if self._db is None:
            return []
        try:
            return [path for (path,) in self._db.execute("SELECT path FROM tags")]
        except sqlite3.DatabaseError as exc:
            self._fail(exc)
            return []

    def by_digest(self, digests: Iterable[str]) -> dict[str, tuple[str, str]]:
        """(tags, details) of rows whose content has one of ``digests``."""
        out: dict[str, tuple[str, str]] = {}
        if self._db is None:
            return out
        wanted = list(dict.fromkeys(digests))
        try:
            for start in range(0, len(wanted), DETAILS_BATCH):
                chunk = wanted[start:start + DETAILS_BATCH]
                marks = ",".join("?" * len(chunk))
                for dig, data, defs in self._db.execute(
                        f"SELECT digest, data, defs FROM tags WHERE digest IN ({marks})", chunk):
                    out.setdefault(dig, (data, defs))
        except sqlite3.DatabaseError as exc:
            self._fail(exc)
        return out

    def details(self, paths: Iterable[str]) -> dict[str, str]:
        """The details (JSON) of ``paths``' rows."""
        out: dict[str, str] = {}
        if self._db is None:
            return out
        wanted = list(paths)
        try:
            for start in range(0, len(wanted), DETAILS_BATCH):
                chunk = wanted[start:start + DETAILS_BATCH]
                marks = ",".join("?" * len(chunk))
                out.update(self._db.execute(f"SELECT path, defs FROM tags WHERE path IN ({marks})", chunk))
        except sqlite3.DatabaseError as exc:
            self._fail(exc)
        return out

    def store(self, rows: Iterable[tuple[str, int, int, int, str, str, str]], stale: Iterable[str] = (),
              tree: str = "", summary: str = "") -> None:
        """Save new rows, forget files that are gone and record the tree, in one transaction; failures
        only cost speed."""
        if self._db is None:
            return
        try:
            with _transaction(self._db):
                self._db.executemany("INSERT OR REPLACE INTO tags VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                self._db.executemany("DELETE FROM tags WHERE path = ?", ((p,) for p in stale))
                self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                     [("tree", tree), ("summary", summary), ("ranking", "")])
        except sqlite3.DatabaseError as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        self.problem = f"cache {self.path} failed ({exc}); it will be rebuilt"
        self.close()
        if self.path is not None:
            _remove(self.path)
            _remove(graph_file(self.path))

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def graph_file(cache: Path) -> Path:
    """Where the ranking graph of the tree cached in ``cache`` is kept."""
    return cache.with_suffix(".graph.npz")


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

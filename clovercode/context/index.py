"""The project's tags: selected files, read from the cache when their path + mtime + size match,
parsed otherwise (in worker processes when there are many)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from clovercode.context.cache import TagCache, cache_file
from clovercode.context.grammars import ContextUnavailable, Grammars, queries_fingerprint
from clovercode.context.selection import SourceFile, select_files
from clovercode.context.tags import FileTags, extract

PARALLEL_FROM = 64  # below this many files to parse, worker start-up costs more than it saves
MAX_JOBS = 8
WORKER_TIMEOUT = 600  # seconds for one worker's share; past it, the share is parsed in-process


@dataclass
class IndexStats:
    files: int = 0
    parsed: int = 0
    cached: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason → files (binary, generated, too large…)
    seconds: float = 0.0
    cache_note: str = ""

    def line(self) -> str:
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
        note = f"; {self.cache_note}" if self.cache_note else ""
        return (f"{self.files} files ({self.parsed} parsed, {self.cached} from cache"
                f"{', skipped ' + skipped if skipped else ''}) in {self.seconds:.2f}s{note}")


@dataclass
class RepoIndex:
    root: Path
    files: dict[str, FileTags]  # project-relative path → tags (skipped files have none)
    stats: IndexStats

    @property
    def definition_count(self) -> int:
        return sum(len(t.names) for t in self.files.values())


@dataclass(frozen=True)
class IndexOptions:
    cache_dir: Path | None  # None: no cache
    max_bytes: int = 512 * 1024
    jobs: int = 0  # 0: one worker per CPU core (at most MAX_JOBS)


def build_index(root: Path, options: IndexOptions) -> RepoIndex:
    started = time.perf_counter()
    root = root.resolve()
    selection = select_files(root, options.max_bytes)
    cache = TagCache(cache_file(options.cache_dir, root) if options.cache_dir else None, queries_fingerprint())
    try:
        rows = cache.load()
        files: dict[str, FileTags] = {}
        todo: list[SourceFile] = []
        for source in selection.files:
            row = rows.get(source.rel)
            tags = _cached(row, source) if row is not None else None
            if tags is None:
                todo.append(source)
            else:
                files[source.rel] = tags
        parsed = parse_files(todo, options.jobs)
        files.update(parsed)
        listed = {s.rel for s in selection.files}
        cache.store(((s.rel, s.mtime_ns, s.size, *parsed[s.rel].cache_columns()) for s in todo),
                    stale=[p for p in rows if p not in listed])
    finally:
        cache.close()
    stats = IndexStats(len(selection.files), len(todo), len(selection.files) - len(todo))
    for tags in files.values():
        if tags.skipped:
            stats.skipped[tags.skipped] = stats.skipped.get(tags.skipped, 0) + 1
    if selection.too_large:
        stats.skipped["too large"] = len(selection.too_large)
    stats.cache_note = cache.problem
    stats.seconds = time.perf_counter() - started
    return RepoIndex(root, dict(sorted(files.items())), stats)


def _cached(row: tuple[int, int, str, str], source: SourceFile) -> FileTags | None:
    mtime, size, data, defs = row
    if mtime != source.mtime_ns or size != source.size:
        return None
    try:
        return FileTags.from_cache_columns(data, defs)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # a damaged row: parse the file again


def parse_files(todo: list[SourceFile], jobs: int = 0) -> dict[str, FileTags]:
    workers = min(jobs or os.cpu_count() or 1, MAX_JOBS)
    items = [(s.rel, str(s.path), s.language) for s in todo]
    if workers <= 1 or len(items) < PARALLEL_FROM:
        return dict(parse_batch(items))
    # Largest files first, dealt round-robin, so every worker gets a similar share of the bytes.
    sizes = {s.rel: s.size for s in todo}
    items.sort(key=lambda item: -sizes[item[0]])
    shares = [items[i::workers] for i in range(workers)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(_parse_share, shares))
    out: dict[str, FileTags] = {}
    for result in results:
        out.update(result)
    return out


class WorkerFailed(Exception):
    """A parser worker process did not deliver; its share is parsed in-process instead (not when
    it was killed by a signal: after Ctrl-C, parsing everything again would hold up the interrupt)."""


def _parse_share(items: list[tuple[str, str, str]]) -> dict[str, FileTags]:
    try:
        return parse_in_worker(items)
    except WorkerFailed:
        return dict(parse_batch(items))


def parse_in_worker(items: list[tuple[str, str, str]]) -> dict[str, FileTags]:
    """Parse ``items`` in a fresh interpreter (JSON lines both ways, so any file name survives)."""
    from clovercode.context.worker import python_argv

    try:
        proc = subprocess.run(python_argv("clovercode.context.worker"), capture_output=True, text=True,
                              input="".join(json.dumps(item) + "\n" for item in items), timeout=WORKER_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        raise WorkerFailed(str(exc)) from None
    if proc.returncode < 0:  # killed by a signal: Ctrl-C (the whole group gets it) or the OOM killer
        raise ContextUnavailable(f"a parser worker was stopped by signal {-proc.returncode}")
    if proc.returncode != 0:
        raise WorkerFailed(proc.stderr[-500:])
    try:
        out = {rel: FileTags.from_json(data) for rel, data in map(json.loads, proc.stdout.splitlines())}
    except (ValueError, KeyError, TypeError) as exc:
        raise WorkerFailed(f"unreadable worker output: {exc}") from None
    if len(out) != len(items):
        raise WorkerFailed(f"worker returned {len(out)} of {len(items)} files")
    return out


def parse_batch(items: list[tuple[str, str, str]]) -> list[tuple[str, FileTags]]:
    """Tags of each (relative path, absolute path, language); runs in worker processes too."""
    grammars = Grammars()
    out = []
    for rel, path, language in items:
        try:
            source = Path(path).read_bytes()
        except OSError:
            out.append((rel, FileTags(language, skipped="unreadable")))
            continue
        try:
            out.append((rel, extract(grammars.get(language), source)))
        except ContextUnavailable:
            raise
        except (ValueError, UnicodeError, RecursionError):
            out.append((rel, FileTags(language, skipped="unparsable")))
    return out

"""The project's tags and ranking graph, brought up to date with the tree at the least cost:

1. list and stat the files (git's view); the fingerprint of every (path, mtime, size, inode) says
   whether anything changed since the graph was last built;
2. nothing changed: the saved graph is loaded whole (no row is decoded);
3. otherwise a file whose stat key matches its row is reused; one whose key changed is read and
   hashed, and reused when a row with the same content exists (a checkout that touched it, a copy);
   the rest is parsed, identical contents once, in worker processes when there are many.

A session keeps its index in memory and passes it back in (``previous``): a step then costs the stat
walk, and only changed files are looked at."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from clovercode.context.cache import TagCache, cache_file, digest, graph_file
from clovercode.context.grammars import ContextUnavailable, Grammars, queries_fingerprint
from clovercode.context.graph import Graph
from clovercode.context.selection import Selection, SourceFile, select_files
from clovercode.context.tags import Definition, FileTags, decode_details, extract
from clovercode.trust.projectview import ProjectView

PARALLEL_FROM = 64  # below this many files to parse, worker start-up costs more than it saves
MAX_JOBS = 32
WORKER_TIMEOUT = 600  # seconds for one worker's share; past it, the share is parsed in-process
Columns = tuple[str, str]  # a file's tags as the cache's two JSON columns (head, details)


@dataclass
class IndexStats:
    files: int = 0
    parsed: int = 0
    cached: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason → files (binary, generated, too large…)
    seconds: float = 0.0
    cache_note: str = ""
    left_out: int = 0  # vendored, generated or build output by path / .gitattributes (never parsed)
    same_content: int = 0  # changed stat, known content: reused without parsing
    distinct: int = 0  # contents parsed (identical files are parsed once)
    graph: str = ""  # "saved" (the tree's, unchanged), "memory" (the session's), "patched", "built"

    def line(self) -> str:
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
        note = f"; {self.cache_note}" if self.cache_note else ""
        reused = f", {self.same_content} unchanged content" if self.same_content else ""
        distinct = f" ({self.distinct} distinct)" if self.distinct < self.parsed else ""
        out = f"; {self.left_out} generated/vendored/build files left out" if self.left_out else ""
        graph = f", graph {self.graph}" if self.graph else ""
        return (f"{self.files} files ({self.parsed} parsed{distinct}, {self.cached} from cache{reused}"
                f"{', skipped ' + skipped if skipped else ''}) in {self.seconds:.2f}s{graph}{out}{note}")


@dataclass(frozen=True)
class IndexOptions:
    cache_dir: Path | None  # None: no cache
    max_bytes: int = 512 * 1024
    jobs: int = 0  # 0: one worker per CPU core (at most MAX_JOBS)
    include_generated: bool = False  # map vendored, generated and build-output files too


class RepoIndex:
    """Tags of a tree and its ranking graph. ``files`` (every file's tags) is materialised only when
    asked for, and the graph only when a ranking has to be computed: a warm map of an unchanged tree
    asked the same question reads the saved ranking and the definitions of the files it shows, and
    never imports numpy."""

    def __init__(self, root: Path, stats: IndexStats, *, tree: str, keys: dict[str, tuple[int, int, int]],
                 files: dict[str, FileTags] | None = None, graph: Graph | None = None,
                 cache_path: Path | None = None, version: str = "", definitions: int | None = None):
        self.root, self.stats, self.tree, self.keys = root, stats, tree, keys
        self._files, self._graph = files, graph
        self._cache_path, self._version = cache_path, version
        self._definition_count = definitions

    @property
    def files(self) -> dict[str, FileTags]:
        """project-relative path → tags (skipped files have no definitions)."""
        if self._files is None:
            cache = TagCache(self._cache_path, self._version)
            try:
                heads = cache.heads()
                details = cache.details(self.keys)
            finally:
                cache.close()
            files = {}
            for rel in self.keys:
                head = heads.get(rel)
                tags = _from_row(head[4], details.get(rel, "[]")) if head else None
                files[rel] = tags if tags is not None else FileTags("?")
            self._files = files
        return self._files

    @property
    def graph(self) -> Graph:
        if self._graph is None:
            if self._files is None and self._cache_path is not None:
                self._graph = Graph.load(graph_file(self._cache_path), self.tree)
            if self._graph is None:
                self._graph = Graph.from_files(self.files, self.keys, self.tree)
        return self._graph

    @property
    def paths(self) -> list[str]:
        return list(self.keys)

    @property
    def definition_count(self) -> int:
        if self._definition_count is None:
            self._definition_count = self.graph.definition_count
        return self._definition_count

    def saved_ranking(self, key: str) -> list[tuple[str, int, float]] | None:
        """The ranking kept for ``key`` (tree, focus, limit), if this tree's last ranking was that one."""
        if self._cache_path is None:
            return None
        cache = TagCache(self._cache_path, self._version)
        try:
            saved = cache.meta("ranking")
        finally:
            cache.close()
        try:
            data = json.loads(saved) if saved else None
            if not data or data.get("key") != key:
                return None
            return [(str(rel), int(offset), float(score)) for rel, offset, score in data["items"]]
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def save_ranking(self, key: str, items: list[tuple[str, int, float]]) -> None:
        if self._cache_path is None:
            return
        cache = TagCache(self._cache_path, self._version)
        try:
            cache.put_meta("ranking", json.dumps({"key": key, "items": items}, separators=(",", ":")))
        finally:
            cache.close()

    def definitions(self, rels: Iterable[str]) -> dict[str, list[Definition]]:
        """The definitions of ``rels``, fetched from the cache in one go when they are not in memory."""
        rels = list(rels)
        if self._files is not None:
            pending = [r for r in rels if r in self._files and self._files[r].details_pending()]
            if pending and self._cache_path is not None:
                for rel, raw in self._fetch(pending).items():
                    self._files[rel].supply_details(raw)
            return {r: self._files[r].defs for r in rels if r in self._files}
        out = {}
        fetched = self._fetch(rels)
        for rel in rels:
            if rel not in self.keys:
                continue
            try:
                out[rel] = _LazyDefinitions(json.loads(fetched.get(rel) or "[]"))  # type: ignore[assignment]
            except (ValueError, TypeError):  # damaged details: keep the names (from the graph)
                graph = self.graph
                fid = graph.path_id(rel)
                start, end = int(graph.file_starts[fid]), int(graph.file_starts[fid + 1])
                out[rel] = decode_details(None, [graph.idents[i] for i in graph.def_ident[start:end].tolist()])
        return out

    def _fetch(self, rels: list[str]) -> dict[str, str]:
        cache = TagCache(self._cache_path, self._version)
        try:
            return cache.details(rels)
        finally:
            cache.close()


class _LazyDefinitions:
    """A file's definitions as decoded JSON, made into ``Definition`` objects one at a time: a map
    shows a few definitions of each of the hundreds of files its ranking reaches into."""

    def __init__(self, rows: list):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> Definition:
        try:
            return Definition(*self.rows[index])
        except TypeError:  # a damaged row
            return Definition("?", "?", 0, "?")


# Runs a module in a fresh interpreter that imports this very clovercode: isolated mode (-I) keeps
# PYTHONPATH, the user site and the current directory out of sys.path, and the package's parent is
# put first only when the interpreter would not find it anyway (a checkout, not an installation;
# putting site-packages first would shadow the standard library).
_BOOT = ("import runpy, sys\n"
         "parent = sys.argv.pop(1)\n"
         "parent in sys.path or sys.path.insert(0, parent)\n"
         "del sys.argv[0]\n"
         "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n")


def python_argv(module: str, *args: str) -> list[str]:
    """argv that runs ``python -m module args`` with this process's clovercode."""
    parent = str(Path(__file__).resolve().parents[2])
    return [sys.executable, "-I", "-c", _BOOT, parent, module, *args]


def tree_fingerprint(selection: Selection, options: IndexOptions) -> str:
    """Changes whenever a file the map reads is added, removed, renamed or its stat key changes."""
    digest_ = hashlib.sha1(f"{options.include_generated}\0{options.max_bytes}\0".encode())
    digest_.update("\0".join(f"{s.rel}\0{s.mtime_ns}\0{s.size}\0{s.inode}" for s in selection.files)
                   .encode("utf-8", errors="surrogateescape"))
    digest_.update("\0".join(selection.too_large).encode("utf-8", errors="surrogateescape"))
    return digest_.hexdigest()


def build_index(root: Path, options: IndexOptions, previous: RepoIndex | None = None) -> RepoIndex:
    started = time.perf_counter()
    root = root.resolve()
    selection = select_files(root, options.max_bytes, options.include_generated)
    tree = tree_fingerprint(selection, options)
    keys = {s.rel: s.key for s in selection.files}
    stats = IndexStats(len(selection.files), 0, len(selection.files), left_out=selection.left_out)
    if selection.too_large:
        stats.skipped["too large"] = len(selection.too_large)

    if previous is not None and previous.tree == tree and previous.root == root:
        stats.skipped.update(previous.stats.skipped)
        stats.graph, stats.seconds = "memory", time.perf_counter() - started
        previous.stats = stats
        return previous

    version = queries_fingerprint()
    path = cache_file(options.cache_dir, root, "generated" if options.include_generated else "") \
        if options.cache_dir else None
    cache = TagCache(path, version)
    cache_path = path if cache.usable else None
    try:
        if cache.usable and previous is None and cache.meta("tree") == tree and graph_file(path).is_file():  # type: ignore[arg-type]
            summary = _summary(cache.meta("summary"))
            if summary is not None:
                stats.skipped.update(summary[1])
                stats.graph, stats.seconds = "saved", time.perf_counter() - started
                return RepoIndex(root, stats, tree=tree, keys=keys, cache_path=cache_path, version=version,
                                 definitions=summary[0])
        base = _base_graph(previous, path) if cache.usable else None
        if base is not None and base.tree != cache.meta("tree"):
            base = None  # the rows were not left at that graph's tree: they cannot fill in for it
        files: dict[str, FileTags] | None = None
        graph: Graph | None = None
        if base is not None:  # patch the last graph: only files whose stat key changed are looked at
            old_keys = dict(zip(base.paths, map(tuple, base.keys.tolist())))
            changed = [s for s in selection.files if old_keys.get(s.rel) != s.key]
            fresh, rows = _resolve(changed, cache.heads([s.rel for s in changed]), cache, options, stats)
            graph = base.patched(fresh, keys, tree)
            stale = [p for p in base.paths if p not in keys]
            definitions, skipped = graph.definition_count, graph.skipped
        else:
            files, rows, stale = _update(selection, options, cache, previous, stats)
            skipped = {}
            for tags in files.values():
                if tags.skipped:
                    skipped[tags.skipped] = skipped.get(tags.skipped, 0) + 1
            definitions = sum(len(t.names) for t in files.values())
        cache.store(rows, stale, tree, json.dumps({"definitions": definitions, "skipped": skipped}))
        cache_path = cache_path if cache.usable else None
    finally:
        cache.close()
    stats.cache_note = cache.problem
    stats.skipped.update(skipped)
    if files is None and cache_path is None:  # the cache failed while patching: its rows are gone
        return build_index(root, IndexOptions(None, options.max_bytes, options.jobs, options.include_generated))
    index = RepoIndex(root, stats, tree=tree, keys=keys, files=files, graph=graph, cache_path=cache_path,
                      version=version, definitions=definitions)
    if cache_path is not None:
        index.graph.save(graph_file(cache_path))
    stats.graph, stats.seconds = ("patched" if base is not None else "built"), time.perf_counter() - started
    return index


def _base_graph(previous: RepoIndex | None, path: Path | None) -> Graph | None:
    """The graph to patch: the session's own, else the one saved beside the cache (any tree)."""
    if previous is not None and previous._graph is not None:
        return previous._graph
    return Graph.load(graph_file(path), None) if path is not None else None


def _summary(text: str) -> tuple[int, dict[str, int]] | None:
    try:
        data = json.loads(text)
        return int(data["definitions"]), {str(k): int(v) for k, v in data["skipped"].items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _update(selection: Selection, options: IndexOptions, cache: TagCache, previous: RepoIndex | None,
            stats: IndexStats) -> tuple[dict[str, FileTags], list[tuple], list[str]]:
    """Every selected file's tags (reused or parsed), the cache rows to write and the rows to drop."""
    # The session's tags in memory, unless it only ever had the saved graph (then the rows are cheaper).
    known = previous._files if previous is not None and previous._files is not None else {}
    known_keys = previous.keys if known else {}
    files: dict[str, FileTags] = {}
    unmatched: list[SourceFile] = []
    for source in selection.files:
        tags = known.get(source.rel) if known_keys.get(source.rel) == source.key else None
        if tags is None:
            unmatched.append(source)
        else:
            files[source.rel] = tags
    fresh, rows = _resolve(unmatched, cache.heads([s.rel for s in unmatched]) if known else cache.heads(),
                           cache, options, stats)
    files.update(fresh)
    listed = {s.rel for s in selection.files}
    stale = [p for p in (known_keys if known else cache.paths()) if p not in listed]
    return dict(sorted(files.items())), rows, stale


def _resolve(sources: list[SourceFile], heads: dict, cache: TagCache, options: IndexOptions,
             stats: IndexStats) -> tuple[dict[str, FileTags], list[tuple]]:
    """Tags of ``sources`` (files not known to be unchanged): from their row when its stat key matches,
    from a row with the same content, else parsed (each distinct content once). Also the rows to write."""
    files: dict[str, FileTags] = {}
    changed: list[SourceFile] = []
    for source in sources:
        head = heads.get(source.rel)
        tags = None
        if head is not None and head[:3] == source.key:
            tags = _from_row(head[4], _lazy_details(cache.path, cache.version, source.rel))
        if tags is None:
            changed.append(source)
        else:
            files[source.rel] = tags
    rows: list[tuple] = []
    if changed:
        contents = _digests(changed)
        reusable = cache.by_digest(d for d in contents.values() if d)
        fresh: dict[str, list[SourceFile]] = {}  # digest → files with that content, parsed once
        for source in changed:
            dig = contents[source.rel]
            columns = reusable.get(dig) if dig else None
            tags = _from_row(*columns) if columns else None
            if tags is not None:
                files[source.rel] = tags
                rows.append((source.rel, *source.key, dig, *columns))  # type: ignore[misc]
                stats.same_content += 1
            else:
                fresh.setdefault(dig or source.rel, []).append(source)
        parsed = parse_columns([group[0] for group in fresh.values()], options.jobs, options.include_generated)
        for group in fresh.values():
            columns = parsed[group[0].rel]
            for source in group:
                files[source.rel] = FileTags.from_cache_columns(*columns)
                rows.append((source.rel, *source.key, contents[source.rel], *columns))
        stats.parsed = sum(len(group) for group in fresh.values())
        stats.distinct = len(fresh)
        stats.cached = stats.files - stats.parsed
    return files, rows


def _from_row(head: str, details: object) -> FileTags | None:
    try:
        return FileTags.from_cache_columns(head, details)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # a damaged row: parse the file again


def _lazy_details(path: Path | None, version: str, rel: str):
    def fetch() -> str:
        cache = TagCache(path, version)
        try:
            return cache.details([rel]).get(rel, "[]")
        finally:
            cache.close()
    return fetch


def _digests(sources: list[SourceFile]) -> dict[str, str]:
    """Content digest (with the language: a header reads differently as C and C++) of each file; ''
    when unreadable (the parser then records why)."""
    out = {}
    views: dict[str, ProjectView] = {}
    for source in sources:
        try:
            data = read_source(source.rel, source.full, views)
        except OSError:
            out[source.rel] = ""
            continue
        out[source.rel] = digest(source.language.encode() + b"\0" + data)
    return out


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_columns(todo: list[SourceFile], jobs: int = 0, keep_generated: bool = False) -> dict[str, Columns]:
    """Tags of ``todo`` as cache columns, in worker processes when there are many files."""
    workers = min(jobs or cpu_count(), MAX_JOBS)
    items = [(s.rel, s.full, s.language) for s in todo]
    if workers <= 1 or len(items) < PARALLEL_FROM:
        return {rel: tags.cache_columns() for rel, tags in parse_batch(items, keep_generated)}
    # Largest files first, dealt round-robin, so every worker gets a similar share of the bytes.
    sizes = {s.rel: s.size for s in todo}
    items.sort(key=lambda item: -sizes[item[0]])
    shares = [items[i::workers] for i in range(workers)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda share: _parse_share(share, keep_generated), shares))
    out: dict[str, Columns] = {}
    for result in results:
        out.update(result)
    return out


def parse_files(todo: list[SourceFile], jobs: int = 0, keep_generated: bool = False) -> dict[str, FileTags]:
    return {rel: FileTags.from_cache_columns(*columns) for rel, columns in parse_columns(todo, jobs, keep_generated).items()}


class WorkerFailed(Exception):
    """A parser worker process did not deliver; its share is parsed in-process instead (not when
    it was killed by a signal: after Ctrl-C, parsing everything again would hold up the interrupt)."""


def _parse_share(items: list[tuple[str, str, str]], keep_generated: bool) -> dict[str, Columns]:
    try:
        return _worker_columns(items, keep_generated)
    except WorkerFailed:
        return {rel: tags.cache_columns() for rel, tags in parse_batch(items, keep_generated)}


def parse_in_worker(items: list[tuple[str, str, str]], keep_generated: bool = False) -> dict[str, FileTags]:
    """Parse ``items`` in a fresh interpreter."""
    return {rel: FileTags.from_cache_columns(*columns) for rel, columns in _worker_columns(items, keep_generated).items()}


def _worker_columns(items: list[tuple[str, str, str]], keep_generated: bool) -> dict[str, Columns]:
    """JSON lines both ways, so any file name survives; the worker sends the cache's columns, which
    the parent stores as they are."""
    argv = python_argv("clovercode.context.worker", *(["--keep-generated"] if keep_generated else []))
    try:
        proc = subprocess.run(argv, capture_output=True, text=True,
                              input="".join(json.dumps(item) + "\n" for item in items), timeout=WORKER_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        raise WorkerFailed(str(exc)) from None
    if proc.returncode < 0:  # killed by a signal: Ctrl-C (the whole group gets it) or the OOM killer
        raise ContextUnavailable(f"a parser worker was stopped by signal {-proc.returncode}")
    if proc.returncode != 0:
        raise WorkerFailed(proc.stderr[-500:])
    try:
        out = {rel: (head, details) for rel, head, details in map(json.loads, proc.stdout.splitlines())}
    except (ValueError, TypeError) as exc:
        raise WorkerFailed(f"unreadable worker output: {exc}") from None
    if len(out) != len(items):
        raise WorkerFailed(f"worker returned {len(out)} of {len(items)} files")
    return out


def read_source(rel: str, full: str, views: dict[str, ProjectView]) -> bytes:
    """The bytes of the map source ``rel`` (``full`` is the project's root joined with it), read
    through the project view: a file swapped for a link out after the listing is refused."""
    if rel and full.replace(os.sep, "/").endswith("/" + rel):
        root, name = full[:len(full) - len(rel)], rel
    else:  # a caller's own (rel, path) pair: the file's directory is all that is known
        root, name = os.path.dirname(full), os.path.basename(full)
    view = views.get(root) or views.setdefault(root, ProjectView(root))
    return view.read_bytes(name)


def parse_batch(items: list[tuple[str, str, str]], keep_generated: bool = False) -> list[tuple[str, FileTags]]:
    """Tags of each (relative path, absolute path, language); runs in worker processes too."""
    grammars = Grammars()
    out = []
    views: dict[str, ProjectView] = {}
    for rel, path, language in items:
        try:
            source = read_source(rel, path, views)
        except OSError:
            out.append((rel, FileTags(language, skipped="unreadable")))
            continue
        try:
            out.append((rel, extract(grammars.get(language), source, keep_generated)))
        except ContextUnavailable:
            raise
        except (ValueError, UnicodeError, RecursionError):
            out.append((rel, FileTags(language, skipped="unparsable")))
    return out

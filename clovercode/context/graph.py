"""The ranking graph of a tree as flat arrays: per file its definitions' names and its references
(to every name, defined in the project or not, so a file added later that defines a name links up with
the files already referring to it). Built from the tags, kept beside the tag cache (``.npz``, no
pickle) with the fingerprint of the tree it describes and every file's stat key, so that

- nothing changed: the arrays are loaded whole (no row is decoded);
- a few files changed: the saved graph is patched — their rows are replaced, every other file's
  arrays are kept as they are — instead of decoding a row per file and rebuilding.

Names are numbered in sorted order, so a patched graph orders its edges as one built from scratch
does and gives the same map (it may still number a name nothing uses any more; ranking ignores it)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from clovercode.context.tags import FileTags
from clovercode.ground.termination import interrupt_behind

GRAPH_VERSION = 2
SKIP_REASONS = ("", "binary", "generated", "minified", "unreadable", "unparsable", "?")


@dataclass
class Graph:
    tree: str  # fingerprint of the tree (paths and stat keys) it was built from
    paths: list[str]  # files, sorted
    keys: Any  # int64[n_files, 3]: each file's stat key (mtime_ns, size, inode)
    idents: list[str]  # every name defined or referred to (after patches: perhaps once), sorted
    file_starts: Any  # int64[n_files + 1]: definitions of file i are [file_starts[i], file_starts[i+1])
    def_ident: Any  # int32[n_defs]: the name of each definition
    ref_file: Any  # int32[n_refs]: file making a reference (in file order)
    ref_ident: Any  # int32[n_refs]: the name referred to
    ref_count: Any  # float64[n_refs]: how often
    skip: Any  # int8[n_files]: index into SKIP_REASONS of why a file was not parsed
    _path_ids: dict[str, int] | None = None

    @property
    def definition_count(self) -> int:
        return len(self.def_ident)

    @property
    def skipped(self) -> dict[str, int]:
        import numpy as np

        counts = np.bincount(self.skip.astype(np.int64), minlength=len(SKIP_REASONS))
        return {SKIP_REASONS[i]: int(n) for i, n in enumerate(counts.tolist()) if i and n}

    def defined_names(self) -> set[str]:
        import numpy as np

        return {self.idents[i] for i in np.unique(self.def_ident).tolist()}

    def path_id(self, rel: str) -> int | None:
        if self._path_ids is None:
            self._path_ids = {p: i for i, p in enumerate(self.paths)}
        return self._path_ids.get(rel)

    @staticmethod
    def from_files(files: dict[str, FileTags], keys: dict[str, tuple[int, int, int]], tree: str = "") -> "Graph":
        """Flat arrays made with C-level iteration (chain, map, fromiter): a Python loop over every tag of
        a large tree would cost most of the map's time. ``files`` in path order."""
        tags_list = list(files.values())
        idents = sorted(set(chain.from_iterable(t.names for t in tags_list)).union(
            chain.from_iterable(t.refs.keys() for t in tags_list)))
        ids = {name: i for i, name in enumerate(idents)}
        return Graph(tree, list(files), _keys_array([keys.get(rel, (0, 0, 0)) for rel in files]), idents,
                     *_arrays(tags_list, ids))

    def patched(self, files: dict[str, FileTags], keys: dict[str, tuple[int, int, int]], tree: str) -> "Graph":
        """This graph brought up to the tree whose files and stat keys are ``keys`` (in path order):
        ``files`` holds the tags of every file whose key changed or that is new."""
        import numpy as np

        old_ids = {p: i for i, p in enumerate(self.paths)}
        kept = np.zeros(len(self.paths), dtype=bool)
        kept[[old_ids[p] for p in keys if p not in files and p in old_ids]] = True
        new_names = set(chain.from_iterable(t.names for t in files.values())).union(
            chain.from_iterable(t.refs.keys() for t in files.values()))
        idents = self.idents
        remap = None
        if not new_names.issubset(idents_set := set(idents)):
            idents = sorted(idents_set | new_names)
            ids = {name: i for i, name in enumerate(idents)}
            remap = np.fromiter(map(ids.__getitem__, self.idents), dtype=np.int32, count=len(self.idents))
        else:
            ids = {name: i for i, name in enumerate(idents)}
        paths = list(keys)
        new_pos = {p: i for i, p in enumerate(paths)}
        # Old files kept: their rows, renumbered to the new file order (and names, if new ones came).
        old_to_new = np.full(len(self.paths), -1, dtype=np.int64)
        kept_ids = np.flatnonzero(kept)
        old_to_new[kept_ids] = [new_pos[self.paths[i]] for i in kept_ids.tolist()]
        def_counts = np.diff(self.file_starts)
        def_keep = np.repeat(kept, def_counts)
        old_def_file = np.repeat(old_to_new, def_counts)[def_keep]
        old_def_ident = self.def_ident[def_keep]
        ref_keep = kept[self.ref_file]
        old_ref_file = old_to_new[self.ref_file[ref_keep]]
        old_ref_ident, old_ref_count = self.ref_ident[ref_keep], self.ref_count[ref_keep]
        if remap is not None:
            old_def_ident, old_ref_ident = remap[old_def_ident], remap[old_ref_ident]
        # Changed and new files: their rows from their tags.
        fresh = list(files.values())
        starts, d_ident, r_file, r_ident, r_count, skip = _arrays(fresh, ids)
        fresh_pos = np.asarray([new_pos[p] for p in files], dtype=np.int64)
        new_def_file = np.repeat(fresh_pos, np.diff(starts))
        new_ref_file = fresh_pos[r_file] if len(r_file) else np.zeros(0, dtype=np.int64)
        # Each file's rows come from one side, so a stable sort by file keeps their order within it.
        def_file = np.concatenate([old_def_file, new_def_file])
        def_order = np.argsort(def_file, kind="stable")
        def_ident = np.concatenate([old_def_ident, d_ident])[def_order]
        file_starts = np.zeros(len(paths) + 1, dtype=np.int64)
        np.cumsum(np.bincount(def_file, minlength=len(paths)), out=file_starts[1:])
        ref_file_all = np.concatenate([old_ref_file, new_ref_file])
        ref_order = np.argsort(ref_file_all, kind="stable")
        skips = np.zeros(len(paths), dtype=np.int8)
        skips[old_to_new[kept_ids]] = self.skip[kept_ids]
        skips[fresh_pos] = skip
        return Graph(tree, paths, _keys_array(list(keys.values())), idents, file_starts, def_ident.astype(np.int32),
                     ref_file_all[ref_order].astype(np.int32),
                     np.concatenate([old_ref_ident, r_ident])[ref_order].astype(np.int32),
                     np.concatenate([old_ref_count, r_count])[ref_order], skips)

    def save(self, path: Path) -> None:
        """Write atomically (a reader never sees half a graph); failures only cost speed next time."""
        import numpy as np

        meta = json.dumps({"version": GRAPH_VERSION, "tree": self.tree})
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, meta=_text_array(meta), paths=_text_array("\0".join(self.paths)),
                         idents=_text_array("\0".join(self.idents)), keys=self.keys, file_starts=self.file_starts,
                         def_ident=self.def_ident, ref_file=self.ref_file, ref_ident=self.ref_ident,
                         ref_count=self.ref_count, skip=self.skip)
            os.replace(tmp, path)
        except BaseException as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            interrupt = interrupt_behind(exc)  # Ctrl-C inside numpy's zip writer comes out as a ValueError
            if interrupt is not None:
                raise interrupt from None
            if not isinstance(exc, OSError):
                raise

    @staticmethod
    def load(path: Path, tree: str | None) -> "Graph | None":
        """The graph saved at ``path`` if it describes ``tree`` (any tree: None); None when absent,
        stale or damaged."""
        import numpy as np

        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(_array_text(data["meta"]))
                if meta.get("version") != GRAPH_VERSION or (tree is not None and meta.get("tree") != tree):
                    return None
                paths, idents = _array_text(data["paths"]), _array_text(data["idents"])
                graph = Graph(str(meta.get("tree")), paths.split("\0") if paths else [],
                              data["keys"], idents.split("\0") if idents else [], data["file_starts"],
                              data["def_ident"], data["ref_file"], data["ref_ident"], data["ref_count"], data["skip"])
        except (OSError, ValueError, KeyError, TypeError, EOFError):
            return None
        n_files, n_idents = len(graph.paths), len(graph.idents)
        if (len(graph.file_starts) != n_files + 1 or int(graph.file_starts[-1]) != len(graph.def_ident)
                or graph.keys.shape != (n_files, 3) or len(graph.skip) != n_files
                or (len(graph.def_ident) and int(graph.def_ident.max()) >= n_idents)
                or not len(graph.ref_file) == len(graph.ref_ident) == len(graph.ref_count)
                or (len(graph.ref_file) and (int(graph.ref_file.max()) >= n_files or int(graph.ref_ident.max()) >= n_idents))):
            return None  # written by something else, or damaged: rebuild from the rows
        return graph


def _keys_array(keys: list[tuple[int, int, int]]) -> Any:
    import numpy as np

    return np.asarray(keys, dtype=np.int64).reshape(len(keys), 3)


def _arrays(tags_list: list[FileTags], ids: dict[str, int]) -> tuple[Any, ...]:
    """(file_starts, def_ident, ref_file, ref_ident, ref_count, skip) of ``tags_list``, names numbered by ``ids``."""
    import numpy as np

    n = len(tags_list)
    def_names = list(chain.from_iterable(t.names for t in tags_list))
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, (t.names for t in tags_list)), dtype=np.int64, count=n), out=starts[1:])
    def_ident = np.fromiter(map(ids.__getitem__, def_names), dtype=np.int32, count=len(def_names))
    ref_names = list(chain.from_iterable(t.refs.keys() for t in tags_list))
    ref_count = np.fromiter(chain.from_iterable(t.refs.values() for t in tags_list), dtype=np.float64,
                            count=len(ref_names))
    ref_file = np.repeat(np.arange(n, dtype=np.int32), [len(t.refs) for t in tags_list])
    ref_ident = np.fromiter(map(ids.__getitem__, ref_names), dtype=np.int32, count=len(ref_names))
    reasons = {reason: i for i, reason in enumerate(SKIP_REASONS)}
    skip = np.fromiter((reasons.get(t.skipped, len(SKIP_REASONS) - 1) for t in tags_list), dtype=np.int8, count=n)
    return starts, def_ident, ref_file, ref_ident, ref_count, skip


def _text_array(text: str) -> Any:
    import numpy as np

    return np.frombuffer(text.encode("utf-8", errors="surrogateescape"), dtype=np.uint8)


def _array_text(array: Any) -> str:
    return bytes(array).decode("utf-8", errors="surrogateescape")

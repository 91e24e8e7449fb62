"""The ranking graph of a tree as flat arrays: per file its definitions' names, per file its references
to names the project defines. Built once from the tags, kept beside the tag cache (``.npz``, no pickle)
with the fingerprint of the tree it describes, and reloaded whole when nothing changed: a warm map of a
monorepo then reads a few arrays instead of decoding a row per file."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from itertools import chain, repeat
from pathlib import Path
from typing import Any

from clovercode.context.tags import FileTags

GRAPH_VERSION = 1


@dataclass
class Graph:
    tree: str  # fingerprint of the tree (paths and stat keys) it was built from
    paths: list[str]  # files, sorted
    idents: list[str]  # every defined name, once
    file_starts: Any  # int64[n_files + 1]: definitions of file i are [file_starts[i], file_starts[i+1])
    def_ident: Any  # int32[n_defs]: the name of each definition
    ref_file: Any  # int32[n_refs]: file making a reference (to a defined name)
    ref_ident: Any  # int32[n_refs]: the name referred to
    ref_count: Any  # float64[n_refs]: how often
    skipped: dict[str, int] = field(default_factory=dict)  # reason → files not parsed
    _path_ids: dict[str, int] | None = None

    @property
    def definition_count(self) -> int:
        return len(self.def_ident)

    def path_id(self, rel: str) -> int | None:
        if self._path_ids is None:
            self._path_ids = {p: i for i, p in enumerate(self.paths)}
        return self._path_ids.get(rel)

    @staticmethod
    def from_files(files: dict[str, FileTags], tree: str = "") -> "Graph":
        """Flat arrays made with C-level iteration (chain, map, fromiter): a Python loop over every tag of
        a large tree would cost most of the map's time."""
        import numpy as np

        tags_list = list(files.values())
        def_names = list(chain.from_iterable(t.names for t in tags_list))
        ident_ids = {name: i for i, name in enumerate(dict.fromkeys(def_names))}
        counts = np.fromiter(map(len, (t.names for t in tags_list)), dtype=np.int64, count=len(tags_list))
        starts = np.zeros(len(tags_list) + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        def_ident = np.fromiter(map(ident_ids.__getitem__, def_names), dtype=np.int32, count=len(def_names))
        ref_names = list(chain.from_iterable(t.refs.keys() for t in tags_list))
        rc = np.fromiter(chain.from_iterable(t.refs.values() for t in tags_list), dtype=np.float64,
                         count=len(ref_names))
        rf = np.repeat(np.arange(len(tags_list), dtype=np.int32), [len(t.refs) for t in tags_list])
        ri = np.fromiter(map(ident_ids.get, ref_names, repeat(-1)), dtype=np.int32, count=len(ref_names))
        defined = ri >= 0  # references to names the project does not define (library calls) drop out
        skipped: dict[str, int] = {}
        for tags in tags_list:
            if tags.skipped:
                skipped[tags.skipped] = skipped.get(tags.skipped, 0) + 1
        return Graph(tree, list(files), list(ident_ids), starts, def_ident, rf[defined], ri[defined], rc[defined],
                     skipped)

    def save(self, path: Path) -> None:
        """Write atomically (a reader never sees half a graph); failures only cost speed next time."""
        import numpy as np

        meta = json.dumps({"version": GRAPH_VERSION, "tree": self.tree, "skipped": self.skipped})
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, meta=_text_array(meta), paths=_text_array("\0".join(self.paths)),
                         idents=_text_array("\0".join(self.idents)), file_starts=self.file_starts,
                         def_ident=self.def_ident, ref_file=self.ref_file, ref_ident=self.ref_ident,
                         ref_count=self.ref_count)
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    @staticmethod
    def load(path: Path, tree: str) -> "Graph | None":
        """The graph saved at ``path`` if it describes ``tree``; None when absent, stale or damaged."""
        import numpy as np

        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(_array_text(data["meta"]))
                if meta.get("version") != GRAPH_VERSION or meta.get("tree") != tree:
                    return None
                paths, idents = _array_text(data["paths"]), _array_text(data["idents"])
                graph = Graph(tree, paths.split("\0") if paths else [], idents.split("\0") if idents else [],
                              data["file_starts"], data["def_ident"], data["ref_file"], data["ref_ident"],
                              data["ref_count"], dict(meta.get("skipped") or {}))
        except (OSError, ValueError, KeyError, TypeError, EOFError):
            return None
        n_files, n_idents = len(graph.paths), len(graph.idents)
        if (len(graph.file_starts) != n_files + 1 or int(graph.file_starts[-1]) != len(graph.def_ident)
                or (len(graph.def_ident) and int(graph.def_ident.max()) >= n_idents)
                or not len(graph.ref_file) == len(graph.ref_ident) == len(graph.ref_count)
                or (len(graph.ref_file) and (int(graph.ref_file.max()) >= n_files or int(graph.ref_ident.max()) >= n_idents))):
            return None  # written by something else, or damaged: rebuild from the rows
        return graph


def save_ranking(path: Path, key: str, order: Any, scores: Any) -> None:
    """Keep the last ranking (for ``key``: tree, focus, limit) so an unchanged tree asked the same
    question skips the power iteration."""
    import numpy as np

    try:
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, key=_text_array(key), order=order, scores=scores)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def load_ranking(path: Path, key: str, n_defs: int) -> tuple[Any, Any] | None:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            if _array_text(data["key"]) != key:
                return None
            order, scores = data["order"], data["scores"]
    except (OSError, ValueError, KeyError, TypeError, EOFError):
        return None
    if len(order) != len(scores) or (len(order) and (int(order.max()) >= n_defs or int(order.min()) < 0)):
        return None
    return order, scores


def _text_array(text: str) -> Any:
    import numpy as np

    return np.frombuffer(text.encode("utf-8", errors="surrogateescape"), dtype=np.uint8)


def _array_text(array: Any) -> str:
    return bytes(array).decode("utf-8", errors="surrogateescape")

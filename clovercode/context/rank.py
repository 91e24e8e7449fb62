"""Rank definitions by how much the rest of the code refers to them (PageRank over the def/ref graph),
personalised to the files and identifiers the task mentions.

The graph has a node per file and a node per defined identifier, so it stays linear in the number of
tags (file → file edges would multiply every common name's referrers by its definers):

- a file steps to the names it refers to (weight: how distinctive the name is × √count), now and
  then to the names it defines itself, and otherwise back to the restart (``LEAK``): a file whose
  only references are generic names passes little rank on;
- a name steps mostly to the files that define it, sometimes back to the files that use it.

Restarts go to the focus (mentioned files and names), or to every file when there is none. The
backward steps are what bring a focused file's own outline and its callers into the map; the
forward steps rank what it depends on. A definition scores the rank its name sends to its file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from clovercode.context.graph import Graph
from clovercode.context.tags import Definition, FileTags

DAMPING = 0.85
ITERATIONS = 60
TOLERANCE = 1e-10
LEAK = 1.0  # restart weight of every file, next to the weights of its references
OWN_SHARE = 0.2  # of a file's steps, those to names it defines
BACK_SHARE = 0.2  # of a name's steps, those back to files that use it
FOCUS_IDENT_WEIGHT = 10.0
GENERIC_DEFINERS = 5  # a name defined in more files than this says little about any one of them
# Method names every standard library has (dict.get, list.append, str.split, Array.push, …) and
# Python builtins: a call `x.get()` or `dict()` is far more often one of those than the project's own.
COMMON_NAMES = frozenset("""
get set add append extend insert remove pop push shift clear copy update keys values items entries
join split strip format replace find index count sort reverse slice splice concat filter map reduce
lower upper startswith endswith encode decode read write close open flush send recv seek
len size length iter next hash equals toString hashCode valueOf isEmpty contains has apply call bind
new clone unwrap expect collect unwrap_or into from as_str to_string println printf print Println
Printf Sprintf Errorf Error String then catch resolve reject log info warn debug error run main test
group groups groupdict span start end match search sub fullmatch findall finditer compile
dict list str int float tuple bool bytes object type range sorted min max sum any all isinstance
getattr setattr hasattr super repr zip enumerate property staticmethod classmethod
""".split())


@dataclass(frozen=True)
class RankedDef:
    rel: str
    definition: Definition
    score: float


def ident_weight(name: str, definers: int, focus: bool) -> float:
    """How much a reference to ``name`` says about where the code is going."""
    weight = _shape_weight(name) * (FOCUS_IDENT_WEIGHT if focus else 1.0)
    return weight * 0.1 if definers > GENERIC_DEFINERS else weight


def _shape_weight(name: str) -> float:
    weight = 0.1 if name[:1] == "_" else 1.0
    if name in COMMON_NAMES:
        return weight * 0.03
    size = len(name)
    if size <= 2:
        return weight * 0.1
    if size <= 5 and name.isalpha() and name.islower():
        return weight * 0.3  # get, add, run, size: as often someone else's method as this project's
    if size >= 8 and ("_" in name.strip("_") or not (name.islower() or name.isupper())):
        return weight * 3.0  # parse_config, RepoIndex: a name that points at one thing
    return weight


def rank_definitions(files: dict[str, FileTags], focus_files: Iterable[str] = (),
                     focus_idents: Iterable[str] = (), limit: int | None = None) -> list[RankedDef]:
    """The best ``limit`` definitions of ``files`` (all when None), best first; ties keep path and
    line order."""
    graph = Graph.from_files(files, {})
    items = ranking_items(graph, rank_graph(graph, focus_files, focus_idents, limit))
    return ranked_defs(items, lambda rels: {rel: files[rel].defs for rel in rels})[:]


RankedItem = tuple[str, int, float]  # (file, index of the definition in that file, score)


def ranking_items(graph: Graph, ranking: "Ranking") -> list[RankedItem]:
    """The ranking as (file, definition index in the file, score), which outlives the graph's arrays."""
    import numpy as np

    order, scores = ranking
    fids = np.searchsorted(graph.file_starts, order, side="right") - 1
    offsets = order - graph.file_starts[fids]
    paths = graph.paths
    return [(paths[f], o, s) for f, o, s in zip(fids.tolist(), offsets.tolist(), scores.tolist())]


def ranked_defs(items: list[RankedItem], definitions: Callable[[list[str]], dict[str, list[Definition]]]) -> "LazyRanked":
    """The ranked items as definitions; ``definitions`` gives files' definitions (from the cache),
    asked for only as far as the ranking is read."""
    return LazyRanked(items, definitions)


class LazyRanked(Sequence[RankedDef]):
    """Ranked definitions resolved as they are read, in chunks: fitting the budget reads the first
    hundred or so, and the files further down are never fetched. An item whose definition is gone (a
    damaged cache row) is left out, so the length is an upper bound until everything was read."""

    def __init__(self, items: list[RankedItem], definitions: Callable[[list[str]], dict[str, list[Definition]]]):
        self._items, self._definitions = items, definitions
        self._files: dict[str, Any] = {}
        self._resolved: list[RankedDef] = []
        self._next = 0

    def __len__(self) -> int:
        return len(self._resolved) + len(self._items) - self._next

    def _ensure(self, count: int) -> None:
        while len(self._resolved) < count and self._next < len(self._items):
            end = min(len(self._items), self._next + max(32, count - len(self._resolved)))
            chunk = self._items[self._next:end]
            wanted = [rel for rel in dict.fromkeys(rel for rel, _, _ in chunk) if rel not in self._files]
            if wanted:
                self._files.update(self._definitions(wanted))
            for rel, offset, score in chunk:
                found = self._files.get(rel, ())
                if offset < len(found):
                    self._resolved.append(RankedDef(rel, found[offset], score))
            self._next = end

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            self._ensure(len(self) if index.stop is None or index.stop < 0 else index.stop)
            return self._resolved[index]
        self._ensure(len(self) if index < 0 else index + 1)
        return self._resolved[index]


Ranking = tuple[Any, Any]  # (definition indices best first, their scores)


def rank_graph(graph: Graph, focus_files: Iterable[str] = (), focus_idents: Iterable[str] = (),
               limit: int | None = None) -> Ranking:
    """Indices (into the graph's definitions) of the best ``limit`` definitions, and their scores.
    Vectorised with numpy: a warm map of a few thousand files must take well under a second."""
    import numpy as np

    n_files = len(graph.paths)
    if not len(graph.def_ident):
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    # The graph's names include those only referred to (library calls): they drop out here, and the
    # defined ones are numbered 0..n_idents in their (sorted) order.
    used = np.unique(graph.def_ident)
    compact = np.full(len(graph.idents), -1, dtype=np.int64)
    compact[used] = np.arange(len(used))
    names = [graph.idents[i] for i in used.tolist()]
    n_idents = len(names)
    size = n_files + n_idents
    focus_file_ids = [i for i in map(graph.path_id, focus_files) if i is not None]
    focus_ident_ids: list[int] = []
    if focus_idents:
        ident_ids = {name: i for i, name in enumerate(names)}
        focus_ident_ids = sorted({ident_ids[n] for n in focus_idents if n in ident_ids})
    dident = compact[graph.def_ident]
    dfile = np.repeat(np.arange(n_files, dtype=np.int64), np.diff(graph.file_starts))
    ri = compact[graph.ref_ident]
    defined = ri >= 0  # references to names the project does not define (library calls) drop out
    rf, ri, rc = graph.ref_file.astype(np.int64)[defined], ri[defined], graph.ref_count[defined]

    # One def edge per (name, file), however often the file defines the name; `same` counts how often.
    pairs, inverse, same = np.unique(dident * n_files + dfile, return_inverse=True, return_counts=True)
    pair_ident, pair_file = pairs // n_files, pairs % n_files
    definers = np.bincount(pair_ident, minlength=n_idents)
    sole = np.full(n_idents, -1, dtype=np.int64)
    sole[pair_ident] = pair_file  # meaningful where definers == 1
    weight = _shape_weights(names) * np.where(definers > GENERIC_DEFINERS, 0.1, 1.0)
    if focus_ident_ids:
        weight[focus_ident_ids] *= FOCUS_IDENT_WEIGHT

    keep = ~((definers[ri] == 1) & (sole[ri] == rf))  # a file's references to its own names only
    rf, ri, rw = rf[keep], ri[keep] + n_files, weight[ri[keep]] * np.sqrt(rc[keep])
    di, df = pair_ident + n_files, pair_file
    dw = weight[pair_ident]
    refs_out = np.bincount(rf, weights=rw, minlength=size)  # per file
    defs_out = np.bincount(df, weights=dw, minlength=size)  # per file
    used_by = np.bincount(ri, weights=rw, minlength=size)  # per name
    forward = np.where(used_by[di] > 0, 1.0 - BACK_SHARE, 1.0) / definers[pair_ident]  # name → its files
    src = np.concatenate([rf, di, ri, df])
    dst = np.concatenate([ri, df, rf, di])
    prob = np.concatenate([
        (1.0 - OWN_SHARE) * rw / (refs_out[rf] + LEAK),  # file → names it uses
        forward,
        BACK_SHARE * rw / np.maximum(used_by[ri], 1e-12),  # name → files that use it
        OWN_SHARE * dw / np.maximum(defs_out[df], 1e-12),  # file → names it defines
    ])

    personal = np.zeros(size)
    personal[focus_file_ids] = 1.0
    personal[[n_files + i for i in focus_ident_ids]] = 1.0
    if not personal.any():
        personal[:n_files] = 1.0
    personal /= personal.sum()
    rank = _pagerank(src, dst, prob, personal, size)

    # A definition scores what its name sends to its file, shared by same-named definitions there;
    # a sliver of the file's own rank orders the definitions nobody refers to.
    share = np.zeros(n_idents)
    share[pair_ident] = np.where(used_by[di] > 0, 1.0 - BACK_SHARE, 1.0) / definers[pair_ident]
    scores = rank[n_files + dident] * share[dident] / same[inverse] + 1e-3 * rank[dfile]
    if limit is not None and limit < len(scores):
        # Only the best `limit` need ordering: partition first, then a stable sort of those by (−score, index).
        top = np.argpartition(-scores, limit - 1)[:limit]
        cutoff = scores[top].min()
        top = np.flatnonzero(scores >= cutoff)  # every tie at the cutoff, so index order decides
        order = top[np.lexsort((top, -scores[top]))][:limit]
    else:
        order = np.argsort(-scores, kind="stable")
    return order, scores[order]


def _shape_weights(names: list[str]) -> Any:
    import numpy as np

    return np.fromiter(map(_shape_weight, names), dtype=np.float64, count=len(names))


def _pagerank(src, dst, prob, personal, size: int):
    """Power iteration; whatever a node does not pass along its edges restarts at ``personal``."""
    import numpy as np

    if size == 0:
        return np.zeros(0)
    kept = np.bincount(src, weights=prob, minlength=size)
    rank = personal.copy()
    for _ in range(ITERATIONS):
        spread = np.bincount(dst, weights=rank[src] * prob, minlength=size)
        restart = float((rank * (1.0 - kept)).sum())
        updated = DAMPING * (spread + restart * personal) + (1 - DAMPING) * personal
        done = float(np.abs(updated - rank).sum()) < TOLERANCE
        rank = updated
        if done:
            break
    return rank

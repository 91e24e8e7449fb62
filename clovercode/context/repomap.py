"""The repository map: index the project, rank its definitions for a focus, fit them to a budget."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from clovercode.context.cache import default_cache_dir
from clovercode.context.index import IndexOptions, IndexStats, RepoIndex
from clovercode.context.mentions import find_mentions
from clovercode.context.rank import RankedItem, rank_graph, ranked_defs, ranking_items
from clovercode.context.render import fit_outline, max_definitions
from clovercode.context.tokens import TokenCounter, estimate_tokens
from clovercode.ground.errors import UsageError


@dataclass
class RepoMap:
    text: str
    tokens: int
    budget: int
    shown: int  # definitions shown
    total: int  # definitions known
    files: int  # files shown
    stats: IndexStats
    focus_files: list[str] = field(default_factory=list)
    focus_idents: list[str] = field(default_factory=list)

    def summary(self) -> str:
        focus = ", ".join(self.focus_files + self.focus_idents)
        return (f"map: {self.shown} of {self.total} definitions from {self.files} files, "
                f"{self.tokens}/{self.budget} tokens{'; focus: ' + focus if focus else ''}\n"
                f"index: {self.stats.line()}")


def index_options(cfg: Any, env: Mapping[str, str] | None = None) -> IndexOptions:
    """Index options from the ``context.*`` settings."""
    env = os.environ if env is None else env
    cache_dir = Path(cfg["context.cache_dir"]).expanduser() if cfg["context.cache_dir"] else default_cache_dir(env)
    return IndexOptions(cache_dir if cfg["context.cache"] else None, cfg["context.max_file_kb"] * 1024,
                        cfg["context.jobs"], cfg["context.include_generated"])


def make_repo_map(index: RepoIndex, budget: int, count_tokens: TokenCounter = estimate_tokens,
                  focus_files: Iterable[str] = (), focus_idents: Iterable[str] = ()) -> RepoMap:
    focus_files, focus_idents = sorted(set(focus_files)), sorted(set(focus_idents))
    items = _ranking(index, focus_files, focus_idents, max_definitions(budget))
    fitted = fit_outline(ranked_defs(items, index.definitions), budget, count_tokens)
    return RepoMap(fitted.text, fitted.tokens, budget, fitted.shown, index.definition_count, fitted.files,
                   index.stats, focus_files, focus_idents)


def _ranking(index: RepoIndex, focus_files: list[str], focus_idents: list[str], limit: int) -> list[RankedItem]:
    """The ranking for this focus. The last one asked for is kept in the cache, so the same question
    on an unchanged tree (`clovercode map` run again) neither loads the graph nor ranks."""
    key = json.dumps([index.tree, focus_files, focus_idents, limit])
    saved = index.saved_ranking(key)
    if saved is not None:
        return saved
    items = ranking_items(index.graph, rank_graph(index.graph, focus_files, focus_idents, limit))
    index.save_ranking(key, items)
    return items


def map_for_texts(index: RepoIndex, budget: int, texts: Iterable[str], count_tokens: TokenCounter = estimate_tokens,
                  extra_files: Iterable[str] = ()) -> RepoMap:
    """The map focused on whatever ``texts`` (the task, the conversation) mention, plus ``extra_files``."""
    found = find_mentions(texts, index.keys, defined_names(index))
    return make_repo_map(index, budget, count_tokens, found.files | {f for f in extra_files if f in index.keys},
                         found.idents)


def defined_names(index: RepoIndex) -> set[str]:
    return set(index.graph.idents)


def resolve_focus(index: RepoIndex, items: Iterable[str], cwd: Path) -> tuple[set[str], set[str]]:
    """``--focus`` values as project files and defined symbols; anything else is a usage error."""
    files: set[str] = set()
    idents: set[str] = set()
    if not items:
        return files, idents  # (the defined names need the graph; a plain map does not)
    names = defined_names(index)
    for item in items:
        rel = _project_path(index.root, cwd, item)
        if rel is not None and rel in index.keys:
            files.add(rel)
            continue
        found = find_mentions([item], index.keys, set())
        if found.files:
            files.update(found.files)
        elif item in names:
            idents.add(item)
        else:
            raise UsageError(f"--focus {item!r} is neither a file the map reads nor a symbol defined in {index.root}",
                             hint="Give a source file path (relative to the project or the current directory) "
                                  "or the name of a function, class or type defined in the project.")
    return files, idents


def _project_path(root: Path, cwd: Path, item: str) -> str | None:
    for base in (cwd, root):
        candidate = (base / item).resolve()
        if candidate.is_file() and root in candidate.parents:
            return candidate.relative_to(root).as_posix()
    return None

"""The repository map of a running task, kept fresh between steps.

Each step the prompt builder asks for the map; the tree is checked with a stat walk (git's file list
and one ``stat`` per source file: milliseconds on a normal project, tens of them on a monorepo). When
nothing changed, the same text comes back, so the prompt's prefix stays the same and a model's
prefix cache keeps working. When a file was created, edited, renamed or deleted, only changed files
are parsed and the map is ranked again, focused on what the conversation mentions by then."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from clovercode.ground.events import EventSink
from clovercode.ground.messages import Message
from clovercode.ground.errors import CloverError


class MapRefresher:
    """Called by the prompt builder every step with the conversation; returns (map text, focus files)."""

    def __init__(self, root: Path, cfg: Any, env: Mapping[str, str], budget: int, count: Callable[[str], int],
                 task: str, touched: set[str], sink: EventSink | None,
                 texts_of: Callable[[Sequence[Message]], list[str]]):
        self.root, self.cfg, self.env, self.budget, self.count = root, cfg, env, budget, count
        self.task, self.touched, self.sink, self.texts_of = task, set(touched), sink, texts_of
        self.index: Any = None
        self.text = ""
        self.focus: set[str] = set()
        self.refreshes = 0

    def __call__(self, messages: Sequence[Message]) -> tuple[str, set[str]]:
        from clovercode.context.index import build_index
        from clovercode.context.repomap import index_options, map_for_texts

        try:
            index = build_index(self.root, index_options(self.cfg, self.env), previous=self.index)
            if index is self.index:
                return self.text, self.focus  # the tree did not change: same map, same prompt prefix
            first = self.index is None
            repo_map = map_for_texts(index, self.budget, [*self.texts_of(messages), self.task], self.count,
                                     extra_files=self.touched)
        except (CloverError, OSError, sqlite3.Error) as exc:
            if self.sink is not None:
                self.sink.emit("warning", text=f"no repository map this time: {exc}", category="context")
            return self.text, self.focus
        self.index, self.text, self.focus = index, repo_map.text, set(repo_map.focus_files)
        if not first:
            self.refreshes += 1
        if self.sink is not None:
            self.sink.emit("context", action="repo_map", tokens=repo_map.tokens, budget=self.budget,
                           shown=repo_map.shown, total=repo_map.total,
                           focus=repo_map.focus_files + repo_map.focus_idents, index=repo_map.stats.line(),
                           refreshed=not first)
        return self.text, self.focus

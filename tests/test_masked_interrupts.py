"""Ctrl-C (or SIGTERM turned into an interrupt) that lands inside library code whose clean-up raises an
error of its own is still an interrupt: exit 130, an interrupted run, no half-written cache file. The
case that showed it: `clovercode fix` interrupted while the repo map saved its graph, where zipfile's
close turned the KeyboardInterrupt into a ValueError and the run ended as an internal error (70)."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from clovercode.context.graph import Graph
from clovercode.ground.termination import Terminated, interrupt_behind


def test_the_interrupt_behind_an_error_is_found_and_a_plain_error_has_none():
    try:
        try:
            raise Terminated(15)
        except KeyboardInterrupt:
            raise ValueError("clean-up failed")
    except ValueError as exc:
        found = interrupt_behind(exc)
    assert isinstance(found, Terminated) and found.signum == 15
    assert interrupt_behind(ValueError("a bug")) is None
    assert isinstance(interrupt_behind(KeyboardInterrupt()), KeyboardInterrupt)


def _graph() -> Graph:
    ints = np.zeros(0, dtype=np.int32)
    return Graph("tree", ["a.py"], np.zeros((1, 3), dtype=np.int64), ["f"], np.zeros(2, dtype=np.int64), ints, ints,
                 ints, np.zeros(0, dtype=np.float64), np.zeros(1, dtype=np.int8))


def test_an_interrupt_while_the_graph_is_saved_stays_an_interrupt_and_leaves_no_file(tmp_path, monkeypatch):
    right = zipfile._ZipWriteFile.close
    calls = []

    def interrupted_close(self):
        calls.append(1)
        if len(calls) == 2:  # Ctrl-C as numpy closes its second array's entry: the zip keeps a writer open
            raise KeyboardInterrupt
        return right(self)

    monkeypatch.setattr(zipfile._ZipWriteFile, "close", interrupted_close)
    with pytest.raises(KeyboardInterrupt):
        _graph().save(tmp_path / "graph.npz")
    monkeypatch.setattr(zipfile._ZipWriteFile, "close", right)
    assert list(tmp_path.iterdir()) == []  # neither the graph nor its temporary file
    _graph().save(tmp_path / "graph.npz")
    assert Graph.load(tmp_path / "graph.npz", "tree") is not None

"""The change a fix commits: the tree the tests last ran on, counted before the commit exists (the
commit message lists it)."""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from clovercode.vcs.changeset import ChangeSet, untracked_stamps
from clovercode.vcs.git import Checkout, FileStat, Start
from clovercode.vcs.ignoredstat import Snapshot, changed, ignored_snapshot


class TestedTree:
    """Takes the change set right before each test run, so the commit holds the tree the last run saw
    (a file the tests themselves write afterwards is not in it), and says what differs from now.

    Files git ignores are watched by stat snapshots (vcs/ignoredstat.py): one at the start, one
    before and one after each test run. What changed between the end of one test run and the start
    of the next is the model's (a file tool or a command), and is named as left out of the commit;
    what a test run wrote (a cache, a report) is the tests'."""

    __test__ = False

    def __init__(self, checkout: Checkout, start: Start):
        self.checkout, self.start = checkout, start
        self.tested: ChangeSet | None = None
        self.by_tests: frozenset[str] = frozenset()  # files the baseline test run wrote
        self.last: Snapshot = ignored_snapshot(checkout)  # ignored files when the model last got the tree
        self.ignored_written: set[str] = set()  # top-relative ignored paths the model changed

    def after_baseline(self) -> None:
        """Files the baseline test run wrote (a report, a log) are the tests', never the model's change."""
        now = self.checkout.untracked()
        self.by_tests = frozenset(now - self.start.untracked)
        untracked = self.start.untracked | self.by_tests
        self.start = replace(self.start, untracked=untracked, stamps=untracked_stamps(self.checkout.top, untracked))
        self.last = ignored_snapshot(self.checkout)

    def after_tests(self) -> None:
        """Called when a test run ended: what it wrote into ignored paths is the tests', not the model's."""
        self.last = ignored_snapshot(self.checkout)

    def _model_ignored(self) -> set[str]:
        """Ignored paths the model changed, up to now (the snapshot is moved on)."""
        now = ignored_snapshot(self.checkout)
        self.ignored_written |= changed(self.last, now)
        self.last = now
        return self.ignored_written

    def before_tests(self, written: Iterable[str]) -> bool:
        """Called right before a test run (run_rounds' ``has_changes``): is there a change to test?"""
        self.tested = self.checkout.changes(self.start, written, self.by_tests, self._model_ignored())
        return bool(self.tested)

    def now(self, written: Iterable[str]) -> ChangeSet:
        return self.checkout.changes(self.start, written, self.by_tests, self._model_ignored())

    def to_commit(self, written: Iterable[str]) -> tuple[ChangeSet, list[str]]:
        """The change to commit (the tested tree when tests ran) and the paths changed since it was tested."""
        now = self.now(written)
        if self.tested is None or self.tested.tree == now.tree:
            return now, []
        since = self.checkout.git("diff-tree", "-r", "--name-only", "--no-renames", "-z", self.tested.tree, now.tree)
        # the left-out list is the latest one: a file left out now was left out of the tested tree too or is new
        return ChangeSet(self.tested.tree, self.tested.paths, now.left_out), [p for p in since.split("\0") if p]


def pending_stats(checkout: Checkout, base: str, changes: ChangeSet) -> list[FileStat]:
    """Lines added and removed per file the commit will hold, for the commit message, which is written
    before the commit exists."""
    stats: dict[str, FileStat] = {}
    if changes.paths:
        out = checkout.git("diff", "--no-ext-diff", "--no-textconv", "--numstat", "--no-renames", "-z", base, changes.tree)
        for record in out.split("\0"):
            if record.strip():
                added, removed, path = record.split("\t", 2)
                stats[path] = FileStat(path, None if added == "-" else int(added), None if removed == "-" else int(removed))
    return [stats[path] for path in sorted(stats)]

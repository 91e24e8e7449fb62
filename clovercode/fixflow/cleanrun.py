"""Does the commit alone pass? Its tree checked out into a clean temporary worktree (vcs/cleancheckout.py),
the same test command run there in the same sandbox, and the verdict taken from that run: a fix the
working tree passed only thanks to a file the commit leaves out (an ignored module, the user's
untracked file, an over-size file) is not called fixed.

``verify_commit`` is the whole check behind one small interface; ``judge_clean`` turns its run into
the conclusion (pure).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from clovercode.executors.base import Executor, with_project_read_only, with_writable
from clovercode.fixflow.results import FAILED, PASSED
from clovercode.fixflow.testrun import TestCommand, TestRun, run_tests
from clovercode.fixflow.verdict import FIXED, REGRESSED, UNVERIFIED, Conclusion, conclude, names, verdict
from clovercode.ground.errors import VcsError
from clovercode.vcs.cleancheckout import clean_checkout
from clovercode.vcs.git import Checkout

NOT_VERIFIED = "not verified in a clean checkout"
SHOWN = 10  # names in one line of the summary; the JSON has all


@dataclass(frozen=True)
class CleanRun:
    """The test run in a clean checkout of the commit (None when it could not run: ``error`` says why)."""

    run: TestRun | None
    seconds: float  # the whole check: checkout, tests, removal
    missing: tuple[str, ...] = ()  # files in the working tree that the commit does not hold
    linked: tuple[str, ...] = ()  # toolchain directories of the working tree linked in read-only
    error: str = ""
    off: str = ""  # why the check was not made at all (fix.verify_clean off)

    def describe(self) -> str:
        """One line: what ran, its result and what it cost."""
        if self.off:
            return f"{NOT_VERIFIED} ({self.off})"
        if self.run is None:
            return f"not run: {self.error}"
        linked = f"; linked read-only from the working tree: {', '.join(self.linked)}" if self.linked else ""
        return f"the commit alone: tests {self.run.describe()}; the whole check took {self.seconds:.1f} s{linked}"

    def to_json(self) -> dict[str, Any]:
        run = self.run
        return {"verified": run is not None, "passed": run.passed if run else None,
                "seconds": round(self.seconds, 3), "exit_code": run.exit_code if run else None,
                "timed_out": run.timed_out if run else None, "failing": run.to_json()["failing"] if run else [],
                "missing_files": list(self.missing), "linked": list(self.linked), "error": self.error or None,
                "note": self.off or None, "output_tail": run.tail() if run else None}


def skipped(why: str) -> CleanRun:
    return CleanRun(None, 0.0, off=why)


def verify_commit(checkout: Checkout, commit: str, base: str, tests: TestCommand, executor: Executor,
                  timeout: float, *, root: Path | None = None, env: Mapping[str, str] | None = None,
                  links: Iterable[tuple[str, Path]] = (), missing: Iterable[str] = ()) -> CleanRun:
    """Run ``tests`` in a clean checkout of ``commit`` (a commit or a tree, on ``base``), under
    ``executor`` made unable to write the working tree, for at most ``timeout`` seconds.

    ``root``: the project root inside the working tree (the tests run in the same place of the
    checkout); ``links``: toolchain directories to link in (vcs/cleancheckout.py); ``missing``: the
    files the working tree has and the commit lacks, carried into the result for the summary.
    """
    started = time.monotonic()
    missing, links = tuple(missing), list(links)
    if timeout <= 0:
        return CleanRun(None, 0.0, missing, error="--max-time ran out before the clean-checkout run")
    rel = os.path.relpath(root, checkout.top) if root is not None else "."
    try:
        with clean_checkout(checkout, commit, base, links) as top:
            where = (top / rel).resolve() if rel != "." else top
            confined = with_writable(with_project_read_only(executor), [top])
            run = run_tests(confined, where, tests.command, max(timeout - (time.monotonic() - started), 0.1), 0, env)
    except (VcsError, OSError) as exc:  # git refused, or the disk is full: said, never a traceback
        return CleanRun(None, time.monotonic() - started, missing, error=f"the clean checkout could not be made: {exc}")
    return CleanRun(run, time.monotonic() - started, missing, tuple(rel for rel, _ in links))


def judge_clean(working: Conclusion, working_run: TestRun | None, baseline: TestRun | None, clean: CleanRun,
                issue_text: str) -> Conclusion:
    """The conclusion once the commit was tested alone: ``fixed`` only if the clean run reproduces the
    fix: it is fixed against the baseline too, and nothing fails there that passed in the working tree
    (a test the working tree fixed, or any other)."""
    if working.outcome != FIXED:
        return working
    if clean.off:
        return Conclusion(FIXED, f"{working.reason} ({NOT_VERIFIED}: {clean.off})", working.named)
    if clean.run is None:
        return Conclusion(UNVERIFIED, f"the working tree's tests showed the fix, but it was {NOT_VERIFIED}: "
                                      f"{clean.error}{_missing(clean)}")
    if clean.run.timed_out:  # cut by --max-time or fix.test_timeout: it shows nothing either way
        return Conclusion(UNVERIFIED, f"{NOT_VERIFIED}: the tests there {clean.run.describe()}{_missing(clean)}")
    alone = conclude(baseline, clean.run, issue_text)
    failing = clean.run.results.with_outcome(FAILED)
    before = set(working_run.results.with_outcome(FAILED)) if working_run is not None else set()
    extra = [t for t in failing if t not in before]  # failing alone, not in the working tree
    fixed = verdict(baseline, working_run).fixed if working_run is not None else ()
    outcomes, lists_passes = clean.run.results.outcomes, clean.run.results.lists_passes
    lost = [t for t in fixed if t not in extra and (outcomes.get(t) != PASSED if lists_passes else outcomes.get(t) == FAILED)]
    worse = working_run is not None and working_run.passed and not clean.run.passed
    if alone.outcome == FIXED and not extra and not lost and not worse:
        return Conclusion(FIXED, f"{working.reason}; the commit alone passes in a clean checkout", working.named)
    parts = [f"the commit alone does not reproduce the fix in a clean checkout (tests {clean.run.describe()})"]
    if extra or lost:
        parts.append(f"failing there, not in the working tree: {names([*extra, *lost], SHOWN)}")
    elif alone.outcome != FIXED:
        parts.append(alone.reason)
    outcome = REGRESSED if alone.outcome == REGRESSED else UNVERIFIED
    return Conclusion(outcome, "; ".join(parts) + _missing(clean), working.named)


def _missing(clean: CleanRun) -> str:
    if not clean.missing:
        return ""
    return f"; in the working tree but not in the commit: {names(clean.missing, SHOWN)}"


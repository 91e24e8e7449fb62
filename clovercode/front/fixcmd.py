"""``clovercode fix``: issue → branch → model + test loop → one commit → push → pull request.

Exit codes (docs/ci.md): 0 fixed (a test that failed before passes now, nothing regressed), 1 changed
but the change breaks tests (or, with no baseline, the tests fail), 3 gave up, 4 no change, 5 model
unavailable, 6 sandbox unavailable, 7 git/GitHub failure (local work kept), 8 the change touches CI
definitions or git hooks (not committed; --allow-ci-changes), 9 unverified (committed, nothing
regressed, but no test shows the fix), 130 interrupted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping

from rich.console import Console
from rich.markup import escape

from clovercode.executors.select import NO_SANDBOX_WARNING
from clovercode.fixflow.changes import TestedTree
from clovercode.fixflow.plan import FixRequest, make_plan
from clovercode.fixflow.rounds import record_event, run_rounds
from clovercode.front.fixoutcome import (OUTCOME_CODES, STATUS, CleanSetup, FixOutcome, check_clean,  # noqa: F401 - fix's API
                                         commit_fix, conclude, print_summary, publish)
from clovercode.github.refs import without_secrets
from clovercode.agent.loop import RunResult
from clovercode.ground.config import Config
from clovercode.ground.events import EventSink
from clovercode.ground.errors import ExitCode, UsageError
from clovercode.ground.termination import exit_code, interrupt_detail
from clovercode.ui.render import ConsoleRenderer
from clovercode.wiring.session import open_session


class Borrowed:
    """A model someone else opened (the REPL's): used here, never closed here."""

    def __init__(self, inner: Any):
        self.inner = inner

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def run_fix(root: Path, cfg: Config, request: FixRequest | str, console: Console,
            env: Mapping[str, str] | None = None, *, backend: Any = None, sink: EventSink | None = None) -> FixOutcome:
    """``backend``: a model already open (the REPL's /fix), left open; ``sink``: what draws the run
    (the REPL's renderer, with its live region and the attempts' rows); default: on ``console``."""
    if isinstance(request, str):
        request = FixRequest(issue_text=request)
    env = os.environ if env is None else env
    # --max-time covers everything from here: the baseline, the rounds, every test run, the clean check
    deadline = time.monotonic() + cfg["max_time"] if cfg["max_time"] else None
    cfg = cfg.with_overrides({"approval": "full-auto"}, "fix (always full-auto)")
    plan = make_plan(root, cfg, request, env)
    if cfg["fix.attempts"] > 1 and plan.git is None:
        raise UsageError("--attempts needs a git checkout and a commit: each attempt works in a worktree of its own",
                         hint="Run inside a git repository without --no-commit, or drop --attempts.")
    if cfg["sandbox"] == "none":
        console.print(f"[bold red]{NO_SANDBOX_WARNING}[/]", highlight=False, soft_wrap=True)
    for note in plan.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    if cfg["fix.attempts"] > 1:
        from clovercode.front.fixattempts import run_attempts  # only a run of several attempts needs it

        return run_attempts(root, cfg, request, plan, console, env, deadline, backend, sink)

    tested = TestedTree(plan.git.checkout, plan.git.start) if plan.git is not None else None

    def has_changes(result: RunResult) -> bool:  # run_rounds asks right before each test run
        return tested.before_tests(result.changed) if tested is not None else bool(result.changed)

    session = open_session(root, cfg, interactive=False, env=env, backend=Borrowed(backend) if backend is not None else None)
    session.command_env = without_secrets(env)  # the model's commands and the tests never see a token
    if request.allow_ci_changes:
        session.allow_ci_changes()
    try:
        rounds = run_rounds(session, plan.issue.task(plan.tests.command if plan.tests else None), plan.tests,
                            cfg["fix.test_rounds"], cfg["fix.test_timeout"], sink or ConsoleRenderer(console), console, has_changes,
                            baseline=cfg["fix.baseline"], issue_text=f"{plan.issue.title}\n{plan.issue.body}",
                            after_baseline=tested.after_baseline if tested is not None else None,
                            after_tests=tested.after_tests if tested is not None else None, deadline=deadline)
    finally:
        session.close()
    clean = CleanSetup(session.executor, session.command_env, cfg["fix.test_timeout"], deadline, cfg["fix.verify_clean"],
                       console)
    outcome = FixOutcome(plan.issue, rounds.result, ExitCode.GAVE_UP, session.last_trajectory, rounds.steps,
                         rounds.summary, plan.tests, rounds.tests, notes=plan.notes,
                         prompt_tokens=rounds.prompt_tokens, completion_tokens=rounds.completion_tokens,
                         seconds=rounds.seconds, baseline=rounds.baseline, summaries=rounds.summaries,
                         usage_estimated=rounds.usage_estimated, tests_note=rounds.tests_note)
    try:
        conclude(outcome, rounds, plan, request, cfg, tested, clean)
    except KeyboardInterrupt as exc:  # while committing, pushing or opening the pull request: report it all the same
        outcome.exit_code = ExitCode(exit_code(getattr(exc, "signum", None)))
        stage = outcome.stage or ("pushing or opening the pull request" if outcome.commit else "committing")
        outcome.error = f"{interrupt_detail(exc)} while {stage}"
    record_event(outcome.trajectory, "fix_result", **outcome.to_json())
    print_summary(console, outcome)
    return outcome

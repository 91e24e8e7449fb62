"""Run a suite: every task × repeat in a fresh repository, through the loop ``fix`` uses (its test
rounds included), timed and recorded; the hidden tests decide completion. Ctrl-C stops the suite and
keeps what was gathered."""

from __future__ import annotations

import io
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from rich.console import Console

from clovercode.agent.budget import StopReason
from clovercode.agent.events import MultiSink
from clovercode.agent.loop import usage_json
from clovercode.ground.config import Config
from clovercode.eval.backends import BackendProvider
from clovercode.eval.record import EventRecorder, TimedBackend
from clovercode.eval.tasks import Suite, Task
from clovercode.eval.workspace import WorkspaceError, changes, head, prepare, run_hidden_tests
from clovercode.fixflow.attempts import attempt_settings
from clovercode.fixflow.issue import Issue, issue_from_text
from clovercode.fixflow.rounds import run_rounds
from clovercode.fixflow.testrun import TestCommand, TestRun
from clovercode.fixflow.verdict import conclude
from clovercode.github.refs import without_secrets
from clovercode.wiring.session import open_session


class Observer(Protocol):
    """The progress display: told when attempts start and end, and sees every loop event."""

    def attempt_started(self, task: Task, repeat: int) -> None:
        ...

    def emit(self, kind: str, **data: Any) -> None:
        ...

    def attempt_finished(self, attempt: dict[str, Any]) -> None:
        ...


class QuietObserver:
    def attempt_started(self, task: Task, repeat: int) -> None:
        pass

    def emit(self, kind: str, **data: Any) -> None:
        pass

    def attempt_finished(self, attempt: dict[str, Any]) -> None:
        pass


@dataclass
class EvalOptions:
    repeats: int = 1
    max_steps: int | None = None  # overrides every task's own budget
    keep_workspaces: bool = False
    # `eval --attempts N`: the repeats are fix's attempts: repeat k gets attempt k's seed and temperature
    # (fixflow/attempts.py), and each is judged by its visible tests as fix judges one, for the choice
    attempts: bool = False


@dataclass
class EvalOutcome:
    attempts: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False


class _Interrupted(Exception):
    def __init__(self, attempt: dict[str, Any] | None):
        super().__init__("interrupted")
        self.attempt = attempt


def run_suite(suite: Suite, cfg: Config, provider: BackendProvider, workdir: Path, *,
              options: EvalOptions | None = None, observer: Observer | None = None,
              on_attempt: Callable[[list[dict[str, Any]]], None] | None = None,
              clock: Callable[[], float] = time.monotonic) -> EvalOutcome:
    """Attempts in order (task 1 × repeats, task 2 × repeats, ...); ``on_attempt`` sees the list
    after each one (to save it as it grows)."""
    options, observer = options or EvalOptions(), observer or QuietObserver()
    outcome = EvalOutcome()
    try:
        for task in suite.tasks:
            for repeat in range(1, options.repeats + 1):
                observer.attempt_started(task, repeat)
                try:
                    attempt = run_attempt(task, repeat, cfg, provider, workdir, options, observer, clock)
                except KeyboardInterrupt:
                    raise _Interrupted(None) from None
                if attempt["status"] == "interrupted":
                    raise _Interrupted(attempt)
                outcome.attempts.append(attempt)
                observer.attempt_finished(attempt)
                if on_attempt:
                    on_attempt(outcome.attempts)
    except _Interrupted as stop:
        outcome.interrupted = True
        if stop.attempt is not None:  # kept for the record; the metrics leave it out
            outcome.attempts.append(stop.attempt)
        if on_attempt:
            on_attempt(outcome.attempts)
    return outcome


def task_config(cfg: Config, task: Task, options: EvalOptions, trajectories: Path,
                temperature: float | None = None) -> Config:
    overrides: dict[str, Any] = {"approval": "full-auto", "trajectory_dir": str(trajectories)}
    if temperature is not None:
        overrides["temperature"] = temperature
    steps = options.max_steps or task.max_steps
    if steps:
        overrides["max_steps"] = steps
    return cfg.with_overrides(overrides, "eval")


def run_attempt(task: Task, repeat: int, cfg: Config, provider: BackendProvider, workdir: Path,
                options: EvalOptions, observer: Observer, clock: Callable[[], float]) -> dict[str, Any]:
    started = clock()
    root = workdir / f"{task.id}.r{repeat}"
    base = {"task": task.id, "repeat": repeat}
    try:
        base_commit = head(prepare(task, root))
    except (WorkspaceError, OSError) as exc:
        return {**base, "status": "error", "error": str(exc), "steps": 0, "seconds": 0.0, "trajectory": []}
    setup_seconds = clock() - started
    backend = provider.backend_for(task, repeat)
    timed = TimedBackend(backend, clock)
    recorder = EventRecorder(clock, timed)
    seed, temperature = attempt_settings(repeat, cfg["temperature"]) if options.attempts else (None, None)
    task_cfg = task_config(cfg, task, options, workdir / "trajectories", temperature)
    session = open_session(root, task_cfg, interactive=False, backend=timed)
    session.seed = seed
    session.command_env = without_secrets(os.environ)  # as in fix: the model's commands never see a token
    visible = TestCommand(task.visible_test_command(), "the task's test command")
    try:
        # fix's own loop: the run, then the tests after each finish, failures fed back for a few rounds
        rounds = run_rounds(session, task_text(task, visible.command), visible, task_cfg["fix.test_rounds"],
                            task.test_timeout, MultiSink(recorder, observer), Console(file=io.StringIO()),
                            lambda result: bool(result.changed))
    finally:
        provider.done_with(backend)
    result = rounds.result
    record = {**base, "stop_reason": result.stop.value, "detail": result.detail, "summary": rounds.summary,
              "steps": rounds.steps, "max_steps": task_cfg["max_steps"], "seconds": round(rounds.seconds, 6),
              "setup_seconds": round(setup_seconds, 6), "changed_files": result.changed,
              "usage": usage_json(rounds.prompt_tokens, rounds.completion_tokens, rounds.usage_estimated),
              "test_rounds": [run.to_json() for run in rounds.tests]}
    events = with_test_runs(recorder.events, rounds.tests)
    if result.stop is StopReason.INTERRUPTED:
        return {**record, "status": "interrupted", "trajectory": events}
    try:
        patch = changes(root, base_commit)
    except WorkspaceError as exc:  # e.g. the run removed .git (only possible without a sandbox)
        patch = f"(no patch: {exc})"
    tests = run_hidden_tests(task, root, session.executor, session.command_env)
    if not options.keep_workspaces:
        shutil.rmtree(root, ignore_errors=True)
    if options.attempts:  # what fix would know of this attempt when it chooses: no hidden test
        record = {**record, **attempt_fields(repeat, seed, temperature, rounds, patch, task_text(task, visible.command))}
    return {**record, "status": "passed" if tests.passed else "failed", "patch": patch,
            "hidden_tests": tests.to_json(), "error": None, "trajectory": events}


def attempt_fields(k: int, seed: int | None, temperature: float | None, rounds: Any, patch: str,
                   issue_text: str) -> dict[str, Any]:
    """An attempt's evidence, as ``fix --attempts`` would see it: the verdict of its visible tests
    against their baseline (fixed / unverified / regressed; ``no_change`` without a change) and its
    diff size."""
    diff = diff_stats(patch)
    after = rounds.tests[-1] if rounds.tests else None
    verdict = conclude(rounds.baseline, after, issue_text).outcome if diff["files"] else "no_change"
    return {"attempt": k, "seed": seed, "temperature": temperature, "verdict": verdict, "diff": diff}


def diff_stats(patch: str) -> dict[str, int]:
    """Files, added and removed lines of a ``git diff`` (headers are not lines of the change)."""
    files = added = removed = 0
    in_hunk = False
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            files, in_hunk = files + 1, False
        elif line.startswith("@@"):
            in_hunk = True
        elif in_hunk and line.startswith("+"):
            added += 1
        elif in_hunk and line.startswith("-"):
            removed += 1
    return {"files": files, "added": added, "removed": removed}


def task_text(task: Task, test_command: str) -> str:
    """What the model reads: the task as an issue, worded exactly as `fix` words one."""
    issue = Issue(task.title, task.problem.strip()) if task.title else issue_from_text(task.problem)
    return issue.task(test_command)


def with_test_runs(events: list[dict[str, Any]], runs: list[TestRun]) -> list[dict[str, Any]]:
    """The trajectory with fix's test runs put where they happened: run N's tests right after the
    N-th ``run_end`` (they are not loop events, so the recorder did not see them)."""
    by_round = {run.round: run for run in runs}
    out: list[dict[str, Any]] = []
    ended = 0
    for event in events:
        out.append(event)
        if event.get("kind") == "run_end":
            run = by_round.get(ended)
            ended += 1
            if run is not None:
                out.append({"kind": "test_run", "t": round(event["t"] + run.seconds, 6), **run.to_json()})
    return out

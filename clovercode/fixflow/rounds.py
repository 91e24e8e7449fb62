"""The test loop: run the tests once before the model acts (the baseline), again after it calls
finish; feed back what the change broke, or the issue's tests still failing, a bounded number of times."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape

from clovercode.agent.budget import StopReason
from clovercode.agent.events import EventSink
from clovercode.agent.loop import RunResult
from clovercode.agent.trajectory import TrajectoryWriter
from clovercode.executors.base import Executor
from clovercode.fixflow.testrun import TestCommand, TestRun, feedback_message, run_tests
from clovercode.fixflow.verdict import Verdict, names, related_failures, verdict
from clovercode.wiring.session import Session
from clovercode.ground.termination import ENDING, interrupt_detail


@dataclass
class Rounds:
    result: RunResult  # the last run of the loop
    finished: bool  # the model called finish at least once
    summary: str | None  # its latest finish summary
    steps: int  # model turns over all rounds
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0  # model rounds and test runs, the baseline included
    tests: list[TestRun] = field(default_factory=list)
    usage_estimated: bool = False
    baseline: TestRun | None = None  # the tests before the model changed anything
    summaries: list[tuple[int, str]] = field(default_factory=list)  # (round, finish summary), in order
    tests_note: str = ""  # why the finished change's tests did not run to the end (--max-time)

    @property
    def verdict(self) -> Verdict | None:
        return verdict(self.baseline, self.tests[-1]) if self.tests else None


def run_rounds(session: Session, task: str, tests: TestCommand | None, max_rounds: int, timeout: float,
               sink: EventSink, console: Console, has_changes: Callable[[RunResult], bool],
               baseline: bool = True, issue_text: str | None = None,
               after_baseline: Callable[[], None] | None = None, after_tests: Callable[[], None] | None = None,
               deadline: float | None = None, test_executor: Executor | None = None) -> Rounds:
    """Run ``task``; while the model's finished change needs work and rounds are left, tell it what.

    "Needs work" is judged against the baseline (verdict.py): a regression, or a still-failing test
    that looks like the issue's own. Failures that were there before and are someone else's never
    start a round. Tests run once the model has finished with a change, and one last time when a
    feedback round stops without finish, so the recorded result describes the tree that is committed.
    ``after_baseline`` is called once the baseline ran (what it wrote is the tests', not the model's),
    ``after_tests`` after each later test run. ``deadline`` (time.monotonic()) is --max-time's end for
    the whole run: the baseline, every model round and every test run fit inside it.
    ``test_executor``: what runs the tests, when not the session's (fix --attempts bounds how many
    attempts' suites run at once).
    """
    executor = test_executor or session.executor
    if deadline is None and session.cfg["max_time"]:
        deadline = time.monotonic() + session.cfg["max_time"]
    before = None
    if tests is not None and baseline:
        console.print(f"[bold]Running the tests before any change (baseline):[/] {escape(tests.command)}", highlight=False)
        try:
            limit = time_left(deadline, timeout)
            before = run_tests(executor, session.root, tests.command, limit, -1, session.command_env)
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM or SIGHUP: nothing has changed yet
            ENDING.deliver()  # acted on: the check points (termination.py) stop raising it
            return Rounds(RunResult(StopReason.INTERRUPTED, 0, f"{interrupt_detail(exc)} while the baseline tests ran",
                                    signal=getattr(exc, "signum", None)), False, None, 0)
        if before.timed_out and limit < timeout:  # --max-time, not the suite, ended it: no time is left for the model
            max_time = session.cfg["max_time"]
            return Rounds(RunResult(StopReason.MAX_TIME, 0, f"reached the time limit ({max_time:g} s) while the "
                                    "baseline tests ran", seconds=before.seconds), False, None, 0,
                          seconds=before.seconds, baseline=before)
        console.print(f"[dim]baseline: {escape(before.describe() + _failing_note(before))}[/]", highlight=False,
                      soft_wrap=True)  # a long test id is never cut
        if after_baseline is not None:
            after_baseline()
    result = _round(session, task, sink, deadline)
    done = Rounds(result, result.stop is StopReason.FINISHED, result.summary, result.steps,
                  result.prompt_tokens, result.completion_tokens, result.seconds, baseline=before,
                  usage_estimated=result.usage_estimated)
    if before is not None:
        done.seconds += before.seconds
        record_event(session.last_trajectory, "test_run", baseline=True, **before.to_json())
    if result.stop is StopReason.FINISHED and result.summary:
        done.summaries.append((0, result.summary))
    feedback = 0
    told_pre_existing = False
    while tests is not None and done.finished and result.stop not in (StopReason.INTERRUPTED, StopReason.MODEL_ERROR):
        if not has_changes(result):
            break
        limit = time_left(deadline, timeout)
        if limit <= 0:
            done.tests_note = f"the tests were not run after the change: --max-time ({session.cfg['max_time']:g} s) ran out"
            break
        console.print(f"[bold]Running the tests:[/] {escape(tests.command)} [dim]({escape(tests.source)})[/]", highlight=False)
        try:
            run = run_tests(executor, session.root, tests.command, limit, feedback, session.command_env)
        except KeyboardInterrupt as exc:  # the executor has killed the tests; report like an interrupted run
            ENDING.deliver()
            done.result = replace(result, stop=StopReason.INTERRUPTED, detail=f"{interrupt_detail(exc)} while the tests ran",
                                  signal=getattr(exc, "signum", None))
            done.tests_note = f"the tests were interrupted ({interrupt_detail(exc)})"
            break
        finally:
            if after_tests is not None:
                after_tests()
        if run.timed_out and limit < timeout:  # cut by --max-time: says nothing about the change (not a hang)
            done.seconds += run.seconds
            record_event(session.last_trajectory, "test_run", cut_by_max_time=True, **run.to_json())
            done.tests_note = (f"the tests were cut after {run.seconds:.0f} s by --max-time "
                               f"({session.cfg['max_time']:g} s), so they show nothing")
            break
        done.tests.append(run)
        done.seconds += run.seconds
        record_event(session.last_trajectory, "test_run", **run.to_json())
        judged = verdict(before, run)
        style = "green" if run.passed else "yellow" if not judged.regressed else "red"
        console.print(f"[{style}]tests {escape(run.describe())}[/]", highlight=False)
        console.print(f"[{style}]verdict: {escape(judged.describe())}[/]", highlight=False, soft_wrap=True)
        related = related_failures(judged.still_failing, task if issue_text is None else issue_text,
                                   result.changed, run.results.files, judged.failing_before) if judged.per_test else []
        # With a baseline, failures that were there before and are not the issue's give the model
        # nothing to do; without one, any failure does.
        needs_work = (judged.regressed or bool(related)) if judged.baseline else not run.passed
        if not needs_work or result.stop is not StopReason.FINISHED or feedback >= max_rounds:
            break
        feedback += 1
        pre_existing = [] if told_pre_existing else [t for t in judged.still_failing if t not in related]
        told_pre_existing = True
        console.print(f"[yellow]Sending the failures back to the model (round {feedback} of {max_rounds})[/]")
        message = feedback_message(run, feedback, max_rounds, judged.regressions, related, pre_existing,
                                   failed_before=judged.failing_before)
        result = _round(session, message, sink, deadline, follow_up=True)
        done.result = result
        done.steps += result.steps
        done.prompt_tokens += result.prompt_tokens
        done.completion_tokens += result.completion_tokens
        done.usage_estimated = done.usage_estimated or result.usage_estimated
        done.seconds += result.seconds
        if result.stop is StopReason.FINISHED:
            done.summary = result.summary or done.summary
            if result.summary:
                done.summaries.append((feedback, result.summary))
        elif result.stop not in (StopReason.INTERRUPTED, StopReason.MODEL_ERROR):
            # its edits are committed too: say that nobody described them
            done.summaries.append((feedback, f"The model stopped without a summary of this round ({result.detail})."))
    return done


def time_left(deadline: float | None, cap: float) -> float:
    """Seconds a step may take: ``cap``, or less when --max-time's ``deadline`` comes first (0: none left)."""
    if deadline is None:
        return cap
    return max(min(cap, deadline - time.monotonic()), 0.0)


def _round(session: Session, task: str, sink: EventSink, deadline: float | None, follow_up: bool = False) -> RunResult:
    """One model round, with what is left of --max-time (the baseline and earlier rounds and test runs
    came out of it)."""
    budget = session.cfg["max_time"]
    if not budget or deadline is None:
        return session.run_task(task, sink, follow_up=follow_up)
    left = deadline - time.monotonic()
    if left <= 0:
        return RunResult(StopReason.MAX_TIME, 0, f"reached the time limit ({budget:g} s) before this round")
    full = session.cfg
    session.cfg = full.with_overrides({"max_time": max(left, 0.1)}, "what is left of max_time")
    try:
        return session.run_task(task, sink, follow_up=follow_up)
    finally:
        session.cfg = full


def _failing_note(run: TestRun) -> str:
    failing = run.results.with_outcome("failed")
    if not failing:
        return ""
    return f"; already failing: {names(failing, 5)}"


def record_event(path: Path | None, kind: str, **data: Any) -> None:
    """Append one event to the run's trajectory (the loop's writer is closed between rounds)."""
    if path is None:
        return
    writer = TrajectoryWriter(path)
    try:
        writer.emit(kind, **data)
    finally:
        writer.close()

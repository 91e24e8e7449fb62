"""The test loop: after the model calls finish, run the tests; feed failures back a bounded number of times."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape

from clovercode.agent.budget import StopReason
from clovercode.agent.events import EventSink
from clovercode.agent.loop import RunResult
from clovercode.agent.trajectory import TrajectoryWriter
from clovercode.fixflow.testrun import TestCommand, TestRun, feedback_message, run_tests
from clovercode.session import Session


@dataclass
class Rounds:
    result: RunResult  # the last run of the loop
    finished: bool  # the model called finish at least once
    summary: str | None  # its latest finish summary
    steps: int  # model turns over all rounds
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0  # model rounds and test runs
    tests: list[TestRun] = field(default_factory=list)
    usage_estimated: bool = False


def run_rounds(session: Session, task: str, tests: TestCommand | None, max_rounds: int, timeout: float,
               sink: EventSink, console: Console, has_changes: Callable[[RunResult], bool]) -> Rounds:
    """Run ``task``; while the model's finished change fails ``tests`` and rounds are left, send it the failures.

    Tests run only once the model has finished with a change; they run one last time when a feedback
    round stops without finish, so the recorded result always describes the tree that gets committed.
    """
    result = session.run_task(task, sink)
    done = Rounds(result, result.stop is StopReason.FINISHED, result.summary, result.steps,
                  result.prompt_tokens, result.completion_tokens, result.seconds, usage_estimated=result.usage_estimated)
    feedback = 0
    while tests is not None and done.finished and result.stop not in (StopReason.INTERRUPTED, StopReason.MODEL_ERROR):
        if not has_changes(result):
            break
        console.print(f"[bold]Running the tests:[/] {escape(tests.command)} [dim]({escape(tests.source)})[/]", highlight=False)
        try:
            run = run_tests(session.executor, session.root, tests.command, timeout, feedback, session.command_env)
        except KeyboardInterrupt:  # the executor has killed the tests; report like an interrupted run
            done.result = replace(result, stop=StopReason.INTERRUPTED, detail="interrupted while the tests ran")
            break
        done.tests.append(run)
        done.seconds += run.seconds
        record_event(session.last_trajectory, "test_run", **run.to_json())
        style = "green" if run.passed else "red"
        console.print(f"[{style}]tests {escape(run.describe())}[/]", highlight=False)
        if run.passed or result.stop is not StopReason.FINISHED or feedback >= max_rounds:
            break
        feedback += 1
        console.print(f"[yellow]Sending the failures back to the model (round {feedback} of {max_rounds})[/]")
        result = session.run_task(feedback_message(run, feedback, max_rounds), sink, follow_up=True)
        done.result = result
        done.steps += result.steps
        done.prompt_tokens += result.prompt_tokens
        done.completion_tokens += result.completion_tokens
        done.usage_estimated = done.usage_estimated or result.usage_estimated
        done.seconds += result.seconds
        if result.stop is StopReason.FINISHED:
            done.summary = result.summary or done.summary
    return done


def record_event(path: Path | None, kind: str, **data: Any) -> None:
    """Append one event to the run's trajectory (the loop's writer is closed between rounds)."""
    if path is None:
        return
    writer = TrajectoryWriter(path)
    try:
        writer.emit(kind, **data)
    finally:
        writer.close()


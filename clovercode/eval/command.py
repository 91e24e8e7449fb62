"""The bodies of ``clovercode eval`` (run a suite), ``eval compare`` and ``eval check``."""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from clovercode.ground.config import Config
from clovercode.ground.errors import ExitCode, UsageError
from clovercode.eval.backends import provider_for
from clovercode.eval.check import check_task
from clovercode.eval.progress import ProgressDisplay
from clovercode.eval.report import print_comparison, print_report
from clovercode.eval.results import RECORDED_SETTINGS, EvalRecord, load_results, now, write_results
from clovercode.eval.runner import EvalOptions, run_suite
from clovercode.eval.tasks import load_suite
from clovercode.executors.select import NO_SANDBOX_WARNING, make_executor


def run_eval(suite_spec: str | None, cfg: Config, console: Console, *, cwd: Path, first: int | None = None,
             task_ids: list[str] | None = None, repeats: int = 1, json_out: Path | None = None,
             max_steps: int | None = None, keep_workspaces: bool = False, attempts: int = 1) -> int:
    """Run the suite, print the report, write the results; the exit code is 130 when interrupted.
    ``attempts`` > 1: each task runs as ``fix --attempts N`` would run it (N attempts, their seeds
    and temperatures), and the report adds best-of-N: did the attempt fix would choose pass."""
    if attempts > 1 and repeats > 1:
        raise UsageError("--attempts N and --repeats K do not go together",
                         hint="--attempts N already runs every task N times (pass@1 is over its N attempts).")
    best_of = attempts if attempts > 1 else None
    repeats = attempts if best_of else repeats
    suite, skipped = load_suite(suite_spec, cwd).select(task_ids).runnable()
    suite = suite.select(first=first)
    for task_id, why in skipped.items():
        console.print(f"[yellow]skipping {escape(task_id)}: {escape(why)}[/]", highlight=False)
    if not suite.tasks:
        raise UsageError("no task left to run" + (" (the others need programs that are not installed)" if skipped else ""))
    provider = provider_for(cfg, cwd)
    make_executor(cfg)  # a sandbox that cannot start is an error now, not after the first task
    record = EvalRecord(suite, provider.name, repeats, {key: cfg[key] for key in RECORDED_SETTINGS})
    record.settings["max_steps"] = max_steps or "per task"
    record.skipped = skipped
    record.best_of = best_of

    def save(attempts: list[dict]) -> None:
        record.attempts = list(attempts)
        record.model = provider.name
        if json_out is not None:
            write_results(json_out, record.to_json())

    with ExitStack() as stack:
        stack.callback(provider.close)
        provider.prepare(suite.tasks, repeats)
        if cfg["sandbox"] == "none":
            console.print(f"[bold red]{NO_SANDBOX_WARNING}[/]", highlight=False, soft_wrap=True)
        each = f"{repeats} attempts, best of {repeats}" if best_of else str(repeats)
        console.print(f"[bold]clovercode eval[/] · suite {escape(suite.name)} ({len(suite.tasks)} tasks × {each})"
                      f" · model {escape(provider.name)} · sandbox {escape(cfg['sandbox'])}", highlight=False, soft_wrap=True)
        if keep_workspaces:
            workdir = Path(tempfile.mkdtemp(prefix="clovercode-eval-"))
            console.print(f"[dim]workspaces kept in {workdir}[/]", highlight=False)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="clovercode-eval-")))
        display = stack.enter_context(ProgressDisplay(console, len(suite.tasks) * repeats, repeats))
        outcome = run_suite(suite, cfg, provider, workdir, observer=display, on_attempt=save,
                            options=EvalOptions(repeats=repeats, max_steps=max_steps, keep_workspaces=keep_workspaces,
                                                attempts=best_of is not None))
    save(outcome.attempts)
    record.interrupted, record.finished_at = outcome.interrupted, now()
    data = record.to_json()
    if json_out is not None:
        write_results(json_out, data)
    console.print()
    print_report(console, data)
    if json_out is not None:
        console.print(f"[dim]Results: {escape(str(json_out))}[/]", highlight=False)
    return int(ExitCode.INTERRUPTED) if outcome.interrupted else int(ExitCode.OK)


def compare_results(a: Path, b: Path, console: Console, *, fail_on_regression: bool = False) -> int:
    result = print_comparison(console, load_results(a), load_results(b), (a.name, b.name))
    return 1 if fail_on_regression and result.regressions else 0


def check_suite(suite_spec: str | None, cfg: Config, console: Console, *, cwd: Path,
                task_ids: list[str] | None = None) -> int:
    """Validate each task: hidden tests fail before and pass with the reference solution. Exit 1 if any is unfair."""
    suite, skipped = load_suite(suite_spec, cwd).select(task_ids).runnable()
    make_executor(cfg)  # the sandbox's self-test, once
    for task_id, why in skipped.items():
        console.print(f"{escape(task_id)}: [yellow]skipped[/] ({escape(why)})", highlight=False)
    bad = 0
    with tempfile.TemporaryDirectory(prefix="clovercode-eval-check-") as tmp:
        for task in suite.tasks:
            check = check_task(task, Path(tmp), cfg)
            bad += not check.ok
            note = "" if check.after is not None or not check.ok else " (no reference solution)"
            mark = "[green]ok[/]" if check.ok else f"[red]unfair:[/] {escape(check.problem)}"
            console.print(f"{escape(task.id)}: {mark}{note}", highlight=False, soft_wrap=True)
    console.print(f"{len(suite.tasks) - bad}/{len(suite.tasks)} tasks are fair tests.")
    return 1 if bad else 0

"""The ``clovercode eval`` command group; registered on the main app by clovercode/front/cli.py, which
passes in its error-mapping group class and the options every command shares."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer

from clovercode.ground.config import load_config
from clovercode.ui.console import make_console


def make_eval_app(base_group: type, model_opt: Any, sandbox_opt: Any, endpoint_opt: Any, api_key_opt: Any) -> typer.Typer:
    class EvalGroup(base_group):  # type: ignore[misc, valid-type]
        """`clovercode eval [SUITE]` means `clovercode eval run [SUITE]`; `compare` and `check` stay subcommands."""

        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
                args = ["run", *args]
            return super().parse_args(ctx, args)

    eval_app = typer.Typer(cls=EvalGroup, help="Measure a model on coding tasks: valid calls, recovery, completion, "
                                               "latency. `clovercode eval [SUITE] [OPTIONS]` is short for `clovercode eval run`.")
    task_ids_opt = typer.Option(None, "--task", help="Only this task id (repeatable).")

    @eval_app.command("run")
    def eval_run(
        suite: Optional[str] = typer.Argument(None, help="builtin (default), a directory of task directories, or a .jsonl file."),
        model: Optional[str] = model_opt,
        endpoint: Optional[str] = endpoint_opt,
        api_key: Optional[str] = api_key_opt,
        sandbox: Optional[str] = sandbox_opt,
        tasks: Optional[int] = typer.Option(None, "--tasks", min=1, help="Only the first N tasks."),
        task_ids: Optional[list[str]] = task_ids_opt,
        repeats: int = typer.Option(1, "--repeats", min=1, help="Attempts per task (pass@k uses k = repeats)."),
        attempts: int = typer.Option(1, "--attempts", min=1, max=16,
                                     help="Run each task as `fix --attempts N` would (N attempts, their seeds) and "
                                          "report pass@1 and best-of-N (did the attempt fix would publish pass)."),
        temperature: Optional[float] = typer.Option(None, "--temperature", min=0.0,
                                                    help="Sampling temperature (repeats differ only above 0)."),
        json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results, with trajectories, to this JSON file."),
        max_steps: Optional[int] = typer.Option(None, "--max-steps", min=1,
                                                help="Step budget for every task (default: each task's own)."),
        keep: bool = typer.Option(False, "--keep-workspaces", help="Keep each attempt's repository for inspection."),
    ) -> None:
        """Run a suite of coding tasks and report valid calls, recovery, completion and latency."""
        from clovercode.eval.command import run_eval

        # No project file: the tasks are not the current project.
        cfg = load_config(None, os.environ, {"model": model, "endpoint": endpoint, "api_key": api_key,
                                             "sandbox": sandbox, "temperature": temperature})
        raise typer.Exit(run_eval(suite, cfg, make_console(), cwd=Path.cwd(), first=tasks, task_ids=task_ids,
                                  repeats=repeats, json_out=json_out, max_steps=max_steps, keep_workspaces=keep,
                                  attempts=attempts))

    @eval_app.command("compare")
    def eval_compare(a: Path = typer.Argument(..., help="Results file A (the baseline)."),
                     b: Path = typer.Argument(..., help="Results file B."),
                     fail_on_regression: bool = typer.Option(False, "--fail-on-regression",
                                                             help="Exit 1 when a task's pass rate fell.")) -> None:
        """Compare two results files metric by metric and task by task."""
        from clovercode.eval.command import compare_results

        raise typer.Exit(compare_results(a, b, make_console(), fail_on_regression=fail_on_regression))

    @eval_app.command("check")
    def eval_check(suite: Optional[str] = typer.Argument(None, help="The suite to validate (default: builtin)."),
                   sandbox: Optional[str] = sandbox_opt, task_ids: Optional[list[str]] = task_ids_opt) -> None:
        """Check that each task's hidden tests fail as given and pass with its reference solution."""
        from clovercode.eval.command import check_suite

        cfg = load_config(None, os.environ, {"sandbox": sandbox})
        raise typer.Exit(check_suite(suite, cfg, make_console(), cwd=Path.cwd(), task_ids=task_ids))

    return eval_app

"""``clovercode eval check``: is each task of a suite a fair test? Its hidden tests must fail on the
untouched repository and pass with the reference solution (SWE-bench calls this validation)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from clovercode.ground.config import Config
from clovercode.eval.tasks import Task
from clovercode.eval.workspace import HiddenTestRun, WorkspaceError, apply_solution, prepare, run_hidden_tests
from clovercode.executors.select import make_executor


@dataclass(frozen=True)
class TaskCheck:
    task: str
    before: HiddenTestRun | None  # hidden tests on the base: must fail
    after: HiddenTestRun | None  # with the reference solution: must pass (None: the task has no solution)
    error: str | None = None

    @property
    def ok(self) -> bool:
        if self.error or self.before is None or self.before.passed or self.before.error:
            return False
        return self.after is None or self.after.passed

    @property
    def problem(self) -> str:
        if self.error:
            return self.error
        if self.before is None or self.before.error:
            return (self.before.error if self.before else None) or "the hidden tests could not run"
        if self.before.passed:
            return "the hidden tests already pass before any change"
        if self.after is not None and not self.after.passed:
            return self.after.error or f"the hidden tests fail with the reference solution (exit {self.after.exit_code})"
        return ""


def check_task(task: Task, workdir: Path, cfg: Config) -> TaskCheck:
    """The hidden tests run in the configured sandbox, as they do after a model's attempt."""
    root = workdir / f"{task.id}.check"
    try:
        executor = make_executor(cfg, prepare(task, root), preflight=False)
        before = run_hidden_tests(task, root, executor)
        prepare(task, root)
        after = run_hidden_tests(task, root, executor) if apply_solution(task, root) else None
    except WorkspaceError as exc:
        return TaskCheck(task.id, None, None, str(exc))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return TaskCheck(task.id, before, after)

"""One attempt's workspace: a fresh git repository at the task's base, its diff after the run, and
the hidden tests, copied in only after the run and executed through the session's executor."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from clovercode.ground.errors import UsageError
from clovercode.eval.tasks import Task
from clovercode.executors.base import Executor
from clovercode.trust import gitsafe

# The harness's own commits: a fixed identity; no signing, hooks or repository programs (trust/gitsafe.py).
GIT_IDENTITY = ("-c", "user.name=clovercode eval", "-c", "user.email=eval@clovercode.invalid")
OUTPUT_KEPT = 4000  # characters of the hidden tests' output kept in the results (the tail)
_NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", "node_modules", ".pytest_cache")
# What running a project's tests leaves behind is not part of the model's change.
NOT_IN_PATCH = tuple(f":(exclude,glob){pattern}" for pattern in
                     ("**/__pycache__/**", "**/*.pyc", "**/node_modules/**", "**/.pytest_cache/**"))


class WorkspaceError(UsageError):
    """The task's repository could not be made (clone failed, base commit missing, bad test patch)."""


@dataclass(frozen=True)
class HiddenTestRun:
    passed: bool
    exit_code: int | None
    timed_out: bool
    seconds: float
    command: str
    output: str  # the tail
    error: str | None = None  # set when the tests could not even be installed

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "exit_code": self.exit_code, "timed_out": self.timed_out,
                "seconds": round(self.seconds, 4), "command": self.command, "output": self.output, "error": self.error}


def git(root: Path, *args: str, check: bool = True, input: str | None = None) -> str:
    proc = gitsafe.run(root, *GIT_IDENTITY, *args, capture_output=True, text=True, input=input)
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise WorkspaceError(f"git {args[0]} failed in {root}: {detail[-1] if detail else f'exit {proc.returncode}'}")
    return proc.stdout


def prepare(task: Task, directory: Path) -> Path:
    """A new git repository at ``directory`` holding the task's repository at its base commit."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    if task.snapshot is not None:
        shutil.copytree(task.snapshot, directory, ignore=_NOT_COPIED)
        git(directory, "init", "-q", "-b", "main")
        git(directory, "add", "-A")
        git(directory, "commit", "-q", "--allow-empty", "-m", f"{task.id}: base")
        return directory
    if not task.repo:
        raise WorkspaceError(f"task {task.id} names neither a snapshot nor a repository")
    proc = gitsafe.run(directory.parent, "clone", "-q", "--no-checkout", task.repo, str(directory),
                       capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise WorkspaceError(f"task {task.id}: cannot clone {task.repo}: {lines[-1] if lines else 'git clone failed'}")
    git(directory, "checkout", "-q", "-B", "eval", task.base_commit or "HEAD")
    git(directory, "remote", "remove", "origin", check=False)  # the model must not fetch the future
    return directory


def head(root: Path) -> str:
    return git(root, "rev-parse", "HEAD").strip()


def changes(root: Path, base: str) -> str:
    """The run's changes against the base commit as a patch: new files included, and commits the
    model may have made counted too."""
    git(root, "add", "-A", "--", ".", *NOT_IN_PATCH)
    return git(root, "diff", *gitsafe.DIFF_FLAGS, "--cached", "--binary", base)


def install_hidden_tests(task: Task, root: Path) -> None:
    if task.hidden_dir is not None:
        shutil.copytree(task.hidden_dir, root, dirs_exist_ok=True, ignore=_NOT_COPIED)
    if task.test_patch:
        _apply(root, task.test_patch, f"task {task.id}: the test patch does not apply")


def apply_solution(task: Task, root: Path) -> bool:
    """Put the task's reference solution in place; False when the task has none."""
    if task.solution_dir is not None:
        shutil.copytree(task.solution_dir, root, dirs_exist_ok=True, ignore=_NOT_COPIED)
    if task.gold_patch:
        _apply(root, task.gold_patch, f"task {task.id}: the reference patch does not apply")
    return task.solution_dir is not None or bool(task.gold_patch)


def _apply(root: Path, patch: str, message: str) -> None:
    proc = gitsafe.run(root, "apply", "--whitespace=nowarn", "-", input=patch, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise WorkspaceError(f"{message}: {lines[0] if lines else 'git apply failed'}")


def run_hidden_tests(task: Task, root: Path, executor: Executor, env: Mapping[str, str] | None = None) -> HiddenTestRun:
    """Install the hidden tests over whatever the run left, then run the task's test command."""
    command = task.hidden_test_command()
    try:
        install_hidden_tests(task, root)
    except (WorkspaceError, OSError) as exc:
        return HiddenTestRun(False, None, False, 0.0, command, "", str(exc))
    result = executor.run(command, root, task.test_timeout, env)
    passed = result.exit_code == 0 and not result.timed_out
    return HiddenTestRun(passed, result.exit_code, result.timed_out, result.seconds, command,
                   result.output[-OUTPUT_KEPT:])

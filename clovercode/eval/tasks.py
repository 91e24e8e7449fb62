"""Eval tasks and suites: the built-in suite, directory suites (``task.toml`` per task) and
external JSON Lines suites in a format close to SWE-bench's. See docs/eval.md for both formats."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from clovercode.ground.errors import UsageError
from clovercode.ground.jsonl import json_objects

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

BUILTIN_NAME = "builtin"
TASK_FILE = "task.toml"
SUITE_FILE = "suite.toml"  # optional: the order of the tasks, a name
KINDS = ("bug", "feature", "refactor", "search", "multi-file", "long", "other")
DEFAULT_TEST_TIMEOUT = 300.0
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_GITHUB_SLUG = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class Task:
    """One coding task: where its repository comes from, what the model is told, how it is judged."""

    id: str
    problem: str
    test_command: str  # run after the run, with the hidden tests in place; exit 0 = completed
    language: str = "unknown"
    kind: str = "other"
    title: str = ""
    snapshot: Path | None = None  # a directory copied as the repository (built-in / directory suites)
    repo: str | None = None  # or a git repository: local path or URL (JSONL suites)
    base_commit: str | None = None
    hidden_dir: Path | None = None  # files copied over the workspace after the run
    test_patch: str = ""  # a diff applied after the run (SWE-bench's test_patch)
    tests: tuple[str, ...] = ()  # tests that must pass: fill {tests} in test_command, or appended
    max_steps: int | None = None
    test_timeout: float = DEFAULT_TEST_TIMEOUT
    solution_dir: Path | None = None  # reference solution files (for `eval check`), never shown to the model
    gold_patch: str = ""  # reference solution as a diff (SWE-bench's patch)
    requires: tuple[str, ...] = ()  # programs the task needs on PATH (python3, node, ...)

    def missing_programs(self) -> list[str]:
        return [program for program in self.requires if shutil.which(program) is None]

    def visible_test_command(self) -> str:
        """The command fix's test rounds run during the attempt: the named tests may not exist yet."""
        return re.sub(r"[ \t]*\{tests\}", "", self.test_command).strip()

    def hidden_test_command(self) -> str:
        if not self.tests:
            return self.test_command.replace("{tests}", "")
        quoted = " ".join(shlex.quote(t) for t in self.tests)
        if "{tests}" in self.test_command:
            return self.test_command.replace("{tests}", quoted)
        return f"{self.test_command} {quoted}"


@dataclass(frozen=True)
class Suite:
    name: str
    source: str  # where it was loaded from, for the results file
    tasks: tuple[Task, ...] = field(default_factory=tuple)

    def runnable(self) -> tuple["Suite", dict[str, str]]:
        """The tasks whose programs are installed, and why each other one is skipped."""
        skipped = {t.id: ", ".join(t.missing_programs()) + " not found" for t in self.tasks if t.missing_programs()}
        return Suite(self.name, self.source, tuple(t for t in self.tasks if t.id not in skipped)), skipped

    def select(self, ids: list[str] | None = None, first: int | None = None) -> "Suite":
        """The tasks named in ``ids`` (in suite order), then at most the ``first`` N of them."""
        tasks = list(self.tasks)
        if ids:
            known = {t.id for t in tasks}
            unknown = [i for i in ids if i not in known]
            if unknown:
                raise UsageError(f"suite '{self.name}' has no task {', '.join(map(repr, unknown))}",
                                 hint="Task ids: " + ", ".join(sorted(known)))
            tasks = [t for t in tasks if t.id in set(ids)]
        if first is not None:
            tasks = tasks[:first]
        return Suite(self.name, self.source, tuple(tasks))


def builtin_dir() -> Path:
    return Path(__file__).resolve().parent / BUILTIN_NAME


def load_suite(spec: str | None, cwd: Path) -> Suite:
    """``spec``: None or "builtin", a directory of task directories, or a ``.jsonl`` file."""
    if spec in (None, "", BUILTIN_NAME):
        return load_task_dirs(builtin_dir(), BUILTIN_NAME)
    path = Path(spec).expanduser()
    path = path if path.is_absolute() else cwd / path
    if path.is_dir():
        return load_task_dirs(path, path.name)
    if path.is_file():
        return load_jsonl(path)
    raise UsageError(f"suite not found: {spec}",
                     hint="Give a .jsonl file, a directory of task directories, or nothing for the built-in suite.")


def load_task_dirs(root: Path, name: str) -> Suite:
    """Every ``*/task.toml`` below ``root``, in the order ``suite.toml`` lists (else by name)."""
    found = {d.name: d for d in sorted(root.iterdir()) if (d / TASK_FILE).is_file()}
    if not found:
        raise UsageError(f"{root} holds no tasks (no */{TASK_FILE})", hint="See docs/eval.md for the suite formats.")
    order = list(found)
    if (root / SUITE_FILE).is_file():
        where = root / SUITE_FILE
        try:
            meta = tomllib.loads(where.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"{where}: not valid TOML: {exc}") from None
        listed = meta.get("tasks", order)
        if not isinstance(listed, list) or sorted(listed) != sorted(found):
            missing, extra = sorted(set(found) - set(listed or [])), sorted(set(listed or []) - set(found))
            raise UsageError(f"{where}: 'tasks' must list every task directory once"
                             + (f"; not listed: {', '.join(missing)}" if missing else "")
                             + (f"; no such task: {', '.join(extra)}" if extra else ""))
        order, name = listed, str(meta.get("name") or name)
    return Suite(name, str(root), tuple(load_task_dir(found[task]) for task in order))


def load_task_dir(directory: Path) -> Task:
    where = directory / TASK_FILE
    try:
        data = tomllib.loads(where.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: not valid TOML: {exc}") from None
    fields = _Fields(data, str(where))
    snapshot = directory / "repo"
    if not snapshot.is_dir():
        raise UsageError(f"{directory}: the task has no repo/ directory (the repository snapshot)")
    hidden = directory / "hidden"
    solution = directory / "solution"
    task = Task(
        id=fields.id(data.get("id", directory.name)),
        problem=fields.text("problem", required=True),
        test_command=fields.text("test_command", required=True),
        language=fields.text("language") or "unknown",
        kind=fields.kind(),
        title=fields.text("title"),
        snapshot=snapshot,
        hidden_dir=hidden if hidden.is_dir() else None,
        tests=fields.tests(),
        max_steps=fields.positive("max_steps", int),
        test_timeout=fields.positive("test_timeout", float) or DEFAULT_TEST_TIMEOUT,
        solution_dir=solution if solution.is_dir() else None,
        requires=fields.tests("requires"),
    )
    fields.reject_unknown({"id", "problem", "test_command", "language", "kind", "title", "tests",
                           "max_steps", "test_timeout", "requires"})
    return task


JSONL_KEYS = {"instance_id", "id", "repo", "base_commit", "problem_statement", "test_command", "tests",
              "FAIL_TO_PASS", "PASS_TO_PASS", "test_patch", "hidden_tests", "patch", "language", "kind",
              "title", "max_steps", "test_timeout", "requires"}
# SWE-bench rows carry more fields (created_at, version, hints_text, ...); they are accepted and ignored.
IGNORED_SWE_BENCH_KEYS = {"created_at", "version", "hints_text", "environment_setup_commit"}


def load_jsonl(path: Path) -> Suite:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read suite {path}: {exc}") from None
    tasks = [_task_from_row(row, f"{path}:{number}", path.parent)
             for number, row in json_objects(text, str(path), UsageError)]
    if not tasks:
        raise UsageError(f"{path} holds no tasks")
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise UsageError(f"{path}: task id '{task.id}' appears twice")
        seen.add(task.id)
    return Suite(path.stem, str(path), tuple(tasks))


def _task_from_row(row: dict[str, Any], where: str, base: Path) -> Task:
    fields = _Fields(row, where)
    repo = fields.text("repo", required=True)
    hidden = fields.text("hidden_tests")
    hidden_dir = _local(hidden, base) if hidden else None
    if hidden_dir is not None and not hidden_dir.is_dir():
        raise UsageError(f"{where}: 'hidden_tests' directory not found: {hidden}")
    tests = fields.tests() + fields.tests("FAIL_TO_PASS") + fields.tests("PASS_TO_PASS")
    task = Task(
        id=fields.id(row.get("instance_id", row.get("id"))),
        problem=fields.text("problem_statement", required=True),
        test_command=fields.text("test_command", required=True),
        language=fields.text("language") or "unknown",
        kind=fields.kind(),
        title=fields.text("title"),
        repo=resolve_repo(repo, base),
        base_commit=fields.text("base_commit") or None,
        hidden_dir=hidden_dir,
        test_patch=fields.text("test_patch"),
        tests=tuple(dict.fromkeys(tests)),
        max_steps=fields.positive("max_steps", int),
        test_timeout=fields.positive("test_timeout", float) or DEFAULT_TEST_TIMEOUT,
        gold_patch=fields.text("patch"),
        requires=fields.tests("requires"),
    )
    fields.reject_unknown(JSONL_KEYS | IGNORED_SWE_BENCH_KEYS)
    return task


def resolve_repo(repo: str, base: Path) -> str:
    """A local path (relative to the suite file) stays a path; URLs stay; ``owner/name`` means GitHub."""
    if "://" in repo or repo.startswith("git@"):
        return repo
    local = _local(repo, base)
    if local.exists():
        return str(local)
    if _GITHUB_SLUG.match(repo):
        return f"https://github.com/{repo}.git"
    return str(local)  # reported as missing when the workspace is made, per task


def _local(text: str, base: Path) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


class _Fields:
    """Typed access to one task record; every error names the file (and line) and the key."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data, self.where = data, where

    def _error(self, message: str) -> UsageError:
        return UsageError(f"{self.where}: {message}", hint="See docs/eval.md for the suite formats.")

    def text(self, key: str, *, required: bool = False) -> str:
        value = self.data.get(key)
        if value is None or value == "":
            if required:
                raise self._error(f"'{key}' is required")
            return ""
        if not isinstance(value, str):
            raise self._error(f"'{key}' must be a string, got {type(value).__name__}")
        return value

    def id(self, value: Any) -> str:
        if not isinstance(value, str) or not _ID.match(value):
            raise self._error(f"task id {value!r} must be letters, digits, '.', '_' or '-' (an 'instance_id' or 'id')")
        return value

    def kind(self) -> str:
        kind = self.text("kind") or "other"
        if kind not in KINDS:
            raise self._error(f"'kind' must be one of {', '.join(KINDS)}; got {kind!r}")
        return kind

    def tests(self, key: str = "tests") -> tuple[str, ...]:
        """A list of strings (test names, program names)."""
        value = self.data.get(key)
        if value is None:
            return ()
        if isinstance(value, str):  # SWE-bench stores these lists as JSON-encoded strings
            try:
                value = json.loads(value) if value.strip() else []
            except json.JSONDecodeError:
                raise self._error(f"'{key}' must be a list of strings (or a JSON string of one)") from None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._error(f"'{key}' must be a list of strings")
        return tuple(value)

    def positive(self, key: str, kind: Callable[[Any], Any]) -> Any:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or (kind is int and value != int(value)):
            raise self._error(f"'{key}' must be a positive {'whole ' if kind is int else ''}number, got {value!r}")
        return kind(value)

    def reject_unknown(self, known: set[str]) -> None:
        unknown = sorted(set(self.data) - known)
        if unknown:
            raise self._error(f"unknown key {', '.join(map(repr, unknown))}")


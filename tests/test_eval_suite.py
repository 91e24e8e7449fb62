"""Suites: the built-in one is real and fair; directory and JSON Lines suites load or fail clearly."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from clovercode.ground.errors import UsageError
from clovercode.eval.check import check_task
from clovercode.eval.tasks import load_suite
from clovercode.ground.config import load_config
from conftest import git, make_git_repo, run_cli


def test_builtin_suite_covers_languages_and_kinds():
    suite = load_suite(None, Path.cwd())
    assert suite.name == "builtin" and len(suite.tasks) >= 20
    assert len({t.id for t in suite.tasks}) == len(suite.tasks)
    languages = Counter(t.language for t in suite.tasks)
    assert set(languages) == {"python", "javascript"} and min(languages.values()) >= 8
    kinds = Counter(t.kind for t in suite.tasks)
    for kind in ("bug", "feature", "refactor", "search", "multi-file", "long"):
        assert kinds[kind] >= 1, kind
    for task in suite.tasks:
        assert task.problem.strip() and task.test_command and task.snapshot.is_dir()
        assert task.hidden_dir is not None and task.solution_dir is not None, task.id
        # hidden means hidden: nothing of hidden/ is in the snapshot the model sees
        hidden = {p.relative_to(task.hidden_dir) for p in task.hidden_dir.rglob("*") if p.is_file()}
        assert not any((task.snapshot / rel).exists() and (task.snapshot / rel).read_bytes() == (task.hidden_dir / rel).read_bytes()
                       for rel in hidden), task.id
    # the first few tasks (--tasks N) mix languages
    assert {t.language for t in suite.select(first=2).tasks} == {"python", "javascript"}


@pytest.mark.slow
def test_every_builtin_task_is_fair(tmp_path):
    """Hidden tests fail on the untouched repository and pass with the reference solution."""
    suite = load_suite("builtin", Path.cwd())
    cfg = load_config(None, os.environ)  # the default sandbox: bubblewrap, workspace-write
    assert cfg["sandbox"] == "workspace-write"
    problems = {}
    for task in suite.tasks:
        check = check_task(task, tmp_path, cfg)
        if not check.ok or check.after is None:
            problems[task.id] = check.problem or "no reference solution"
    assert problems == {}


def test_select_by_id_and_count():
    suite = load_suite(None, Path.cwd())
    picked = suite.select(["py-semver", "js-chunk"])
    assert [t.id for t in picked.tasks] == ["js-chunk", "py-semver"]  # suite order
    assert len(suite.select(first=3).tasks) == 3
    with pytest.raises(UsageError, match="has no task 'nope'"):
        suite.select(["nope"])


def write_task(root: Path, name: str, toml: str, files: dict[str, str] | None = None) -> Path:
    task = root / name
    (task / "repo").mkdir(parents=True)
    (task / "task.toml").write_text(toml)
    for rel, text in (files or {"repo/a.txt": "a\n"}).items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    return task


GOOD = 'problem = "do it"\ntest_command = "true"\n'


def test_directory_suite(tmp_path):
    write_task(tmp_path / "mine", "b-task", GOOD + 'kind = "feature"\nlanguage = "shell"\nmax_steps = 7\n')
    write_task(tmp_path / "mine", "a-task", GOOD)
    suite = load_suite(str(tmp_path / "mine"), Path.cwd())
    assert suite.name == "mine" and [t.id for t in suite.tasks] == ["a-task", "b-task"]
    b = suite.tasks[1]
    assert (b.kind, b.language, b.max_steps, b.hidden_dir, b.solution_dir) == ("feature", "shell", 7, None, None)
    (tmp_path / "mine" / "suite.toml").write_text('name = "ordered"\ntasks = ["b-task", "a-task"]\n')
    suite = load_suite(str(tmp_path / "mine"), Path.cwd())
    assert suite.name == "ordered" and [t.id for t in suite.tasks] == ["b-task", "a-task"]


@pytest.mark.parametrize("toml, message", [
    ('test_command = "true"\n', "'problem' is required"),
    (GOOD + 'kind = "chore"\n', "'kind' must be one of"),
    (GOOD + "max_steps = 0\n", "'max_steps' must be a positive whole number"),
    (GOOD + 'max_step = 3\n', "unknown key 'max_step'"),
    (GOOD + "tests = 3\n", "'tests' must be a list of strings"),
    (GOOD + "requires = [1]\n", "'requires' must be a list of strings"),
    ("problem = \n", "not valid TOML"),
])
def test_directory_task_errors_name_file_and_key(tmp_path, toml, message):
    write_task(tmp_path, "t", toml)
    with pytest.raises(UsageError, match=message) as caught:
        load_suite(str(tmp_path), Path.cwd())
    assert str(tmp_path / "t" / "task.toml") in str(caught.value)


def test_suite_toml_must_list_every_task(tmp_path):
    write_task(tmp_path, "a", GOOD)
    write_task(tmp_path, "b", GOOD)
    (tmp_path / "suite.toml").write_text('tasks = ["a", "c"]\n')
    with pytest.raises(UsageError, match="not listed: b; no such task: c"):
        load_suite(str(tmp_path), Path.cwd())


def test_missing_suite_and_empty_dir(tmp_path):
    with pytest.raises(UsageError, match="suite not found"):
        load_suite("nowhere.jsonl", tmp_path)
    with pytest.raises(UsageError, match="holds no tasks"):
        load_suite(str(tmp_path), tmp_path)


def test_jsonl_suite_swe_bench_style(tmp_path):
    repo = make_git_repo(tmp_path / "project")
    base = git(repo, "rev-parse", "HEAD").strip()
    rows = [
        {"instance_id": "proj__1", "repo": "project", "base_commit": base, "problem_statement": "Fix it.",
         "test_command": "python3 -m pytest -q", "FAIL_TO_PASS": json.dumps(["tests/test_a.py::test_new"]),
         "PASS_TO_PASS": ["tests/test_a.py::test_old"], "test_patch": "diff --git ...", "patch": "diff --git ...",
         "created_at": "2024-01-01", "version": "1.0", "hints_text": "", "environment_setup_commit": base},
        {"id": "remote-1", "repo": "file:///srv/git/x.git", "problem_statement": "Y", "test_command": "make test {tests} -k",
         "tests": ["a b"], "language": "c", "kind": "bug"},
        {"id": "gh-1", "repo": "octo/widgets", "problem_statement": "Z", "test_command": "npm test"},
    ]
    path = tmp_path / "suite.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    suite = load_suite(str(path), Path.cwd())
    first, second, third = suite.tasks
    assert suite.name == "suite" and first.id == "proj__1" and first.repo == str(repo) and first.base_commit == base
    assert first.tests == ("tests/test_a.py::test_new", "tests/test_a.py::test_old")
    assert first.hidden_test_command() == "python3 -m pytest -q tests/test_a.py::test_new tests/test_a.py::test_old"
    assert first.test_patch and first.gold_patch
    assert second.repo == "file:///srv/git/x.git" and second.hidden_test_command() == "make test 'a b' -k"
    assert third.repo == "https://github.com/octo/widgets.git" and third.hidden_test_command() == "npm test"


@pytest.mark.parametrize("line, message", [
    ("{not json", ":1: not valid JSON"),
    ("[1]", ":1: each line must be a JSON object"),
    ('{"repo": ".", "problem_statement": "x", "test_command": "t"}', "task id None must be"),
    ('{"id": "a", "repo": ".", "test_command": "t"}', "'problem_statement' is required"),
    ('{"id": "a", "repo": ".", "problem_statement": "x", "test_command": "t", "FAIL_TO_PASS": "[oops"}', "'FAIL_TO_PASS' must be a list"),
    ('{"id": "a", "repo": ".", "problem_statement": "x", "test_command": "t", "hidden_tests": "nope"}', "'hidden_tests' directory not found"),
    ('{"id": "a", "repo": ".", "problem_statement": "x", "test_command": "t", "timeout": 3}', "unknown key 'timeout'"),
])
def test_jsonl_errors_name_the_line(tmp_path, line, message):
    path = tmp_path / "s.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(UsageError, match=message):
        load_suite(str(path), tmp_path)


def test_jsonl_duplicate_ids(tmp_path):
    row = json.dumps({"id": "a", "repo": ".", "problem_statement": "x", "test_command": "t"})
    path = tmp_path / "s.jsonl"
    path.write_text(row + "\n" + row + "\n")
    with pytest.raises(UsageError, match="task id 'a' appears twice"):
        load_suite(str(path), tmp_path)


def test_eval_check_cli_reports_an_unfair_task(tmp_path):
    write_task(tmp_path / "s", "already-passes", 'problem = "x"\ntest_command = "true"\n')
    write_task(tmp_path / "s", "fair", 'problem = "x"\ntest_command = "grep -q fixed a.txt"\n',
               {"repo/a.txt": "broken\n", "solution/a.txt": "fixed\n"})
    proc = run_cli("eval", "check", str(tmp_path / "s"))
    assert proc.returncode == 1, proc.stderr
    assert "already-passes: unfair: the hidden tests already pass before any change" in proc.stdout
    assert "fair: ok" in proc.stdout and "1/2 tasks are fair tests." in proc.stdout

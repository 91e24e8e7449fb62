"""`fix --attempts N` (issue 47): N attempts side by side, each in its own worktree with its own
recording (``model.K.jsonl``), and the one the tests prove best is published. Real git repositories,
real unittest runs, a replay model; the CLI tests use a real process (and the fake GitHub)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli_env, git, make_git_repo
from conftest import tool_call_text as call
from conftest import write_replay
from fake_github import fake_github, github_api  # noqa: F401 - fixtures
from rich.console import Console

from clovercode.fixflow.attempts import attempts_table, choose, replay_for
from clovercode.fixflow.plan import FixRequest
from clovercode.front.fixcmd import run_fix
from clovercode.ground.config import load_config
from clovercode.ground.errors import UsageError

TESTS = f"{sys.executable} -m unittest -q"
PROJECT = {
    "calc.py": "def add(a, b):\n    return a - b  # bug\n",
    "test_calc.py": ("import unittest\n\nfrom calc import add\n\n\n"
                     "class CalcTest(unittest.TestCase):\n"
                     "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"),
}
ISSUE = "add() subtracts: add(2, 3) gives -1"
VIEW = call("view_file", path="calc.py")
FIX = call("edit_file", path="calc.py", old_text="    return a - b  # bug", new_text="    return a + b")


def note(lines: int) -> str:
    """A change that fixes nothing: ``lines`` comment lines at the top of calc.py."""
    return call("edit_file", path="calc.py", old_text="def add(a, b):",
                new_text="".join(f"# note {i}\n" for i in range(lines)) + "def add(a, b):")


def project(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    for rel, text in PROJECT.items():
        (source / rel).write_text(text)
    return make_git_repo(tmp_path / "work", source)


def recordings(tmp_path: Path, *edits: str) -> Path:
    """model.jsonl, and model.K.jsonl for attempt K with the K-th edit."""
    for k, edit in enumerate(edits, 1):
        write_replay(tmp_path / f"model.{k}.jsonl", VIEW, edit, call("finish", summary=f"attempt {k}"))
    return write_replay(tmp_path / "model.jsonl", VIEW, call("finish", summary="nothing"))


def fix(tmp_path: Path, work: Path, model: Path, **settings) -> dict:
    flags = {"model": f"replay:{model}", "sandbox": "none", "fix.test_command": TESTS, "fix.test_rounds": 0,
             "trajectory_dir": str(tmp_path / "trajectories"), **settings}
    cfg = load_config(work, os.environ, flags)
    with open(os.devnull, "w") as sink:
        outcome = run_fix(work, cfg, FixRequest(issue_text=ISSUE), Console(file=sink))
    return json.loads(json.dumps(outcome.to_json()))


def left_behind(work: Path) -> tuple[int, str]:
    return (git(work, "worktree", "list", "--porcelain").count("worktree "),
            git(work, "for-each-ref", "refs/clovercode"))  # no checkpoint of an attempt either


def test_only_the_attempt_whose_fix_the_tests_prove_is_committed(tmp_path):
    work = project(tmp_path)
    model = recordings(tmp_path, note(1), FIX, note(2))
    result = fix(tmp_path, work, model, **{"fix.attempts": 3})
    assert result["chosen"] == 2 and result["status"] == "fixed" and result["exit_code"] == 0
    verdicts = [a["verdict"] for a in result["attempts"]]
    assert verdicts == ["unverified", "fixed", "unverified"]
    assert [a["model"].rsplit("/", 1)[-1] for a in result["attempts"]] == ["model.1.jsonl", "model.2.jsonl", "model.3.jsonl"]
    chosen = result["attempts"][1]
    assert chosen["tests"]["clean_checkout"] == {"verified": True, "passed": True}
    assert chosen["diff"] == {"files": 1, "added": 1, "removed": 1} and chosen["commit"] == result["commit"]
    # the branch holds attempt 2's commit, and the user's checkout is on it with the fix
    assert git(work, "rev-parse", result["branch"]).strip() == result["commit"]
    assert git(work, "rev-list", "--count", f"main..{result['branch']}").strip() == "1"
    assert "return a + b" in (work / "calc.py").read_text() and git(work, "status", "--porcelain") == ""
    assert left_behind(work) == (1, "")
    assert all(Path(a["trajectory"]).is_file() for a in result["attempts"])


def test_ties_go_to_the_smallest_diff_then_the_lowest_attempt():
    def entry(k: int, verdict: str, added: int, steps: int = 3, commit: str | None = "c") -> dict:
        return {"attempt": k, "verdict": verdict, "commit": commit, "diff": {"files": 1, "added": added, "removed": 0},
                "steps": steps}
    assert choose([entry(1, "unverified", 1), entry(2, "fixed", 9), entry(3, "regressed", 0)]) == 2
    assert choose([entry(1, "unverified", 5), entry(2, "unverified", 2), entry(3, "unverified", 2)]) == 2
    assert choose([entry(1, "unverified", 2, 5), entry(2, "unverified", 2, 4)]) == 2
    assert choose([entry(1, "regressed", 1), entry(2, "gave_up", 0, commit=None)]) == 1
    assert choose([entry(1, "no_change", 0, commit=None)]) is None
    table = attempts_table([entry(1, "unverified", 5), entry(2, "fixed", 2)], 2)
    assert table.startswith("clovercode chose attempt 2 of 2") and "<details>" in table and "| 1 | unverified |" in table


def test_each_attempt_replays_its_own_recording_or_the_shared_one(tmp_path):
    shared = write_replay(tmp_path / "m.jsonl", "x")
    write_replay(tmp_path / "m.2.jsonl", "y")
    assert replay_for(shared, 1) == shared and replay_for(shared, 2) == tmp_path / "m.2.jsonl"


def test_attempts_need_a_commit(tmp_path):
    work = project(tmp_path)
    cfg = load_config(work, os.environ, {"model": "replay:x.jsonl", "sandbox": "none", "fix.attempts": 2})
    with pytest.raises(UsageError, match="--attempts needs a git checkout"):
        run_fix(work, cfg, FixRequest(issue_text=ISSUE, commit=False), Console(file=open(os.devnull, "w")))


@pytest.mark.slow  # the real CLI, a bare origin and the fake GitHub (about 5 s)
def test_when_no_attempt_is_proven_a_draft_comes_from_the_smallest_diff(tmp_path, fake_github):  # noqa: F811
    work = project(tmp_path)
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    git(work, "remote", "add", "origin", origin.as_uri())
    git(work, "push", "-q", "origin", "main")
    fake_github.bare_repo = origin
    fake_github.add_repo("octo/calc")
    fake_github.add_issue("octo/calc", 7, "add() subtracts", ISSUE)
    model = recordings(tmp_path, note(3), note(1), note(2))
    proc = subprocess.run([sys.executable, "-m", "clovercode", "fix", "--github-issue", "octo/calc#7", "--pr",
                           "--repo", str(work), "--sandbox", "none", "--model", f"replay:{model}", "--json",
                           "--test-command", TESTS, "--test-rounds", "0", "--attempts", "3"], capture_output=True, text=True, timeout=300,
                          env=cli_env(GITHUB_TOKEN="ghs_valid_token", CLOVERCODE_GITHUB_API_URL=fake_github.url))
    result = json.loads(proc.stdout)
    assert proc.returncode == 9 and result["status"] == "unverified", proc.stderr
    assert result["chosen"] == 2 and [a["verdict"] for a in result["attempts"]] == ["unverified"] * 3
    [create] = fake_github.calls("pulls/create")
    body = create.body["body"]
    assert create.body["draft"] is True and "clovercode chose attempt 2 of 3" in body and "<details>" in body
    assert "| 1 | unverified | +3 −0 in 1 file |" in body
    pushed = subprocess.run(["git", "-C", str(origin), "rev-parse", result["branch"]], capture_output=True, text=True)
    assert pushed.stdout.strip() == result["commit"]
    assert left_behind(work) == (1, "")


@pytest.mark.slow  # a real `fix` process, stopped while every attempt's command runs (about 4 s)
def test_sigterm_stops_every_attempt_and_leaves_no_worktree_or_ref(tmp_path):
    work = project(tmp_path)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    markers = [tmp_path / f"started-{k}" for k in (1, 2)]
    model = recordings(tmp_path, *(call("run_command", command=f"touch {m}; sleep 60") for m in markers))
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "fix", ISSUE, "--repo", str(work), "--sandbox", "none",
                             "--model", f"replay:{model}", "--json", "--test-command", TESTS, "--attempts", "2"],
                            env=cli_env(TMPDIR=str(scratch)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not all(m.exists() for m in markers) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert all(m.exists() for m in markers), proc.communicate(timeout=5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    result = json.loads(out)
    assert result["status"] == "interrupted" and "Traceback" not in err and result["commit"] is None
    assert [a["status"] for a in result["attempts"]] == ["cancelled", "cancelled"]
    assert left_behind(work) == (1, "") and git(work, "branch", "--list").strip() == "* main"
    assert not list(scratch.glob("clovercode-attempt-*"))


@pytest.mark.slow  # two attempts, test runs and a clean checkout (about 4 s on a loaded machine)
def test_first_publishes_the_first_fixed_attempt_and_stops_the_others(tmp_path):
    work = project(tmp_path)
    marker = tmp_path / "slow-started"
    model = recordings(tmp_path, FIX, call("run_command", command=f"touch {marker}; sleep 60"))
    flags = {"model": f"replay:{model}", "sandbox": "none", "fix.test_command": TESTS, "fix.test_rounds": 0,
             "trajectory_dir": str(tmp_path / "trajectories"), "fix.attempts": 2}
    started = time.monotonic()
    with open(os.devnull, "w") as sink:
        outcome = run_fix(work, load_config(work, os.environ, flags), FixRequest(issue_text=ISSUE, first=True),
                          Console(file=sink))
    result = json.loads(json.dumps(outcome.to_json()))
    assert time.monotonic() - started < 30  # the other attempt's sleep 60 was killed
    assert result["chosen"] == 1 and result["status"] == "fixed"
    assert [a["status"] for a in result["attempts"]] == ["fixed", "cancelled"]
    assert "--first: attempt 1 is fixed" in result["attempts"][1]["reason"]
    assert git(work, "rev-parse", result["branch"]).strip() == result["commit"]
    assert left_behind(work) == (1, "")


@pytest.mark.slow  # the tiny model decodes four attempts' turns (about 3.5 s)
def test_an_attempt_decodes_in_the_batch_what_it_decodes_alone(tmp_path, monkeypatch):
    """The tiny model (float64, continuous batching, a generator per request): attempt 1 of three,
    its turns decoded in one batch with the others', writes what attempt 1 alone writes with the
    same seed; the other attempts, with other seeds, write something else. The system prompt names
    the attempt's worktree, so both runs get the same worktree paths (a random one would change the
    prompt, not the decoding)."""
    import re

    from clovercode.fixflow.plan import make_plan
    from clovercode.front.fixattempts import run_attempts
    from clovercode.vcs import attempttrees

    real = attempttrees.tempfile.mkdtemp

    def same_place(*args, prefix: str = "", **kwargs) -> str:
        if not prefix.startswith(attempttrees.PREFIX):  # anyone else's scratch directory
            return real(*args, prefix=prefix, **kwargs)
        k = re.search(r"-(\d+)-$", prefix).group(1)
        place = tmp_path / "trees" / f"{attempttrees.PREFIX}{k}"
        place.mkdir(parents=True)
        return str(place)
    monkeypatch.setattr(attempttrees.tempfile, "mkdtemp", same_place)
    work = project(tmp_path)

    def turns(n: int) -> list[list[str]]:
        flags = {"model": "tiny:dim=32,layers=1,heads=2,seed=1", "sandbox": "none", "fix.test_command": "none",
                 "temperature": 1.5, "max_new_tokens": 24, "max_steps": 2, "max_format_errors": 5,
                 "trajectory_dir": str(tmp_path / f"t{n}"), "fix.attempts": n}
        cfg = load_config(work, os.environ, flags).with_overrides({"approval": "full-auto"}, "fix")
        request = FixRequest(issue_text=ISSUE)
        with open(os.devnull, "w") as sink:
            outcome = run_attempts(work, cfg, request, make_plan(work, cfg, request, os.environ), Console(file=sink),
                                   os.environ, None)
        texts = []
        for attempt in outcome.attempts:
            lines = [json.loads(line) for line in Path(attempt["trajectory"]).read_text().splitlines()]
            texts.append([e["raw"] for e in lines if e.get("kind") == "model_turn"])
        return texts

    alone, together = turns(1), turns(3)
    assert alone[0] and together[0] == alone[0], (alone, together)
    assert together[1] != together[0] and together[2] != together[0]
    assert left_behind(work) == (1, "")


@pytest.mark.slow  # the bench on the tiny model: three fix runs of 1 and 2 attempts (about 4 s)
def test_the_attempts_bench_prints_the_price_of_n_attempts_last(tmp_path):
    from clovercode.backends.tiny import TinyBackend, parse_spec
    from clovercode.bench.attempts import final_line, run_bench

    cfg = load_config(tmp_path, os.environ, {"model": "tiny", "sandbox": "none", "max_new_tokens": 8, "max_steps": 1,
                                            "fix.test_command": TESTS, "fix.test_rounds": 0, "context.map_tokens": 0})
    backend = TinyBackend(parse_spec("tiny:dim=32,layers=1,heads=2"))
    try:
        report = run_bench(backend, cfg, (1, 2))
    finally:
        backend.close()
    assert [r["n"] for r in report["rows"]] == [1, 2] and [len(r["verdicts"]) for r in report["rows"]] == [1, 2]
    assert 0 < report["rows"][0]["tokens"] <= 8 and report["rows"][1]["tokens"] > report["rows"][0]["tokens"] // 2
    assert final_line(report, 2).startswith("2 attempts vs 1: wall ") and "forwards per token" in final_line(report, 2)


@pytest.mark.parametrize("flags, says", [(["--first"], "--first needs --attempts N"),
                                         (["--attempts", "0"], "--attempts must be at least 1"),
                                         (["--attempts", "17"], "--attempts must be at most 16")])
def test_bad_attempt_flags_fail_before_the_model_with_a_clear_error(tmp_path, flags, says):
    from typer.testing import CliRunner

    from clovercode.front.cli import app

    work = project(tmp_path)
    result = CliRunner().invoke(app, ["fix", ISSUE, "--repo", str(work), "--sandbox", "none",
                                      "--model", "replay:none.jsonl", *flags])
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output
    assert left_behind(work) == (1, "")


def test_the_attempts_test_runs_take_turns_for_the_cores(tmp_path):
    """Two suites through one slot never overlap (each holds a lock directory while it runs), also
    through the copies the clean check and the stop make."""
    import threading

    from clovercode.executors.base import with_project_read_only, with_stop, with_writable
    from clovercode.executors.local import LocalExecutor
    from clovercode.front.fixattempts import TestSlots

    slots = threading.BoundedSemaphore(1)
    suite = "mkdir lock || exit 9; sleep 0.3; rmdir lock"
    stop = threading.Event()
    runners = [with_writable(with_project_read_only(TestSlots(LocalExecutor(), slots)), [tmp_path]),
               with_stop(TestSlots(LocalExecutor(), slots), stop)]
    assert all(isinstance(r, TestSlots) for r in runners)
    codes: list[int | None] = []
    threads = [threading.Thread(target=lambda r=r: codes.append(r.run(suite, tmp_path, 10).exit_code)) for r in runners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [0, 0]


WRITES_VENV = ("import os, unittest\n\n\nclass ProbeTest(unittest.TestCase):\n"
               "    def test_probe(self):\n"
               "        try:\n            open('.venv/written-by-an-attempt', 'w').close()\n"
               "        except OSError:\n            pass\n")


@pytest.mark.slow  # a virtualenv, two attempts in bubblewrap, a clean check (about 4 s)
def test_the_attempts_use_the_project_virtualenv_and_cannot_write_it(tmp_path):
    import shutil
    import venv

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    PROJECT["test_probe.py"] = WRITES_VENV
    try:
        work = project(tmp_path)
    finally:
        del PROJECT["test_probe.py"]
    venv.create(work / ".venv", with_pip=False, symlinks=True)
    (work / ".gitignore").write_text(".venv/\n")
    git(work, "add", ".gitignore")
    git(work, "commit", "-q", "-m", "ignore the virtualenv")
    model = recordings(tmp_path, FIX, note(1))
    result = fix(tmp_path, work, model, **{"fix.attempts": 2, "sandbox": "workspace-write",
                                           "fix.test_command": ".venv/bin/python -m unittest -q"})
    assert result["chosen"] == 1 and result["status"] == "fixed", [(a["verdict"], a["reason"], a["error"]) for a in result["attempts"]]
    assert [a["tests"]["passed"] for a in result["attempts"]] == [True, False]  # the suite ran on the linked .venv
    assert not (work / ".venv" / "written-by-an-attempt").exists()
    assert not (work / ".venv").is_symlink() and (work / ".venv" / "pyvenv.cfg").is_file()  # the removal left it alone
    assert left_behind(work) == (1, "")


@pytest.mark.slow  # two attempts whose commands outlast --max-time (about 3 s)
def test_max_time_stops_every_attempt_and_its_command(tmp_path):
    work = project(tmp_path)
    model = recordings(tmp_path, call("run_command", command="sleep 60"), call("run_command", command="sleep 60"))
    started = time.monotonic()
    result = fix(tmp_path, work, model, **{"fix.attempts": 2, "max_time": 2.5})
    assert time.monotonic() - started < 30  # before: each thread's `sleep 60` ran to its end
    assert result["status"] == "gave_up" and result["exit_code"] == 3 and result["chosen"] is None
    assert [(a["status"], a["reason"]) for a in result["attempts"]] == [("gave_up", "reached the time limit (2.5 s)")] * 2
    assert left_behind(work) == (1, "")

"""The runner on real git repositories: external suites at a base commit with a test patch, setup
errors, Ctrl-C keeping the results gathered so far, the model timing, and `eval compare`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from clovercode.backends.base import Finish, TextDelta, Usage
from clovercode.ground.config import load_config
from clovercode.eval.backends import ReplayDirectory
from clovercode.eval.record import EventRecorder, TimedBackend
from clovercode.eval.results import EvalRecord, write_results
from clovercode.eval.runner import EvalOptions, run_suite
from clovercode.eval.tasks import load_suite
from clovercode.eval.workspace import changes
from conftest import cli_env, default_sigint, git, make_git_repo, run_cli
from test_eval_metrics import attempt
from test_parser_table import xml

BUGGY = "def double(x):\n    return x + x + 1\n"
FIXED = "def double(x):\n    return x + x\n"
TEST_PATCH = """\
diff --git a/test_hidden.py b/test_hidden.py
new file mode 100644
--- /dev/null
+++ b/test_hidden.py
@@ -0,0 +1,8 @@
+import unittest
+
+from calc import double
+
+
+class Hidden(unittest.TestCase):
+    def test_double(self):
+        self.assertEqual(double(21), 42)
"""


def replays(directory: Path, **turns: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, texts in turns.items():
        (directory / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return directory


def config(replay_dir: Path):
    return load_config(None, os.environ, {"model": f"replay:{replay_dir}"})  # the default sandbox


def project_with_history(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose base commit has the bug and whose later commit fixed it."""
    repo = tmp_path / "project"
    repo.mkdir()
    (repo / "calc.py").write_text(BUGGY)
    make_git_repo(repo)
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text(FIXED)
    git(repo, "commit", "-qam", "the fix")
    return repo, base


def test_jsonl_task_runs_at_its_base_commit_with_the_test_patch(tmp_path):
    repo, base = project_with_history(tmp_path)
    suite_file = tmp_path / "suite.jsonl"
    rows = [{"instance_id": "calc-1", "repo": "project", "base_commit": base, "problem_statement": "double() is off by one",
             "test_command": "python3 -m unittest -q {tests}", "FAIL_TO_PASS": ["test_hidden"], "test_patch": TEST_PATCH},
            {"instance_id": "gone-1", "repo": "missing-repo", "problem_statement": "x", "test_command": "true"}]
    suite_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    suite = load_suite(str(suite_file), tmp_path)
    rec = replays(tmp_path / "rec", **{"calc-1": [
        xml("view_file", path="calc.py"),
        xml("edit_file", path="calc.py", old_text="x + x + 1", new_text="x + x"),
        xml("run_command", command="git remote -v; ls"),
        xml("finish", summary="fixed")], "gone-1": [xml("finish", summary="x")]})
    saved = []
    outcome = run_suite(suite, config(rec), ReplayDirectory(rec), tmp_path / "work",
                        options=EvalOptions(keep_workspaces=True), on_attempt=lambda a: saved.append(len(a)))
    first, second = outcome.attempts
    assert saved == [1, 2] and not outcome.interrupted
    assert first["status"] == "passed" and first["hidden_tests"]["command"] == "python3 -m unittest -q test_hidden"
    events = first["trajectory"]
    view = next(e for e in events if e["kind"] == "observation" and e["name"] == "view_file")
    assert "x + x + 1" in view["text"]  # the model saw the base commit, not the fix that came later
    listing = next(e for e in events if e["kind"] == "observation" and e["name"] == "run_command")["text"]
    assert "origin" not in listing and "test_hidden.py" not in listing  # no remote, hidden tests not there yet
    assert first["patch"].startswith("diff --git a/calc.py b/calc.py") and "-    return x + x + 1" in first["patch"]
    assert events[0]["kind"] == "run_start" and events[0]["executor"] == "workspace-write"  # the session's sandbox
    workspace = tmp_path / "work" / "calc-1.r1"
    assert git(workspace, "rev-parse", "HEAD").strip() == base and (workspace / "test_hidden.py").is_file()
    assert second["status"] == "error" and "cannot clone" in second["error"] and second["trajectory"] == []


def test_hidden_tests_replace_what_the_model_wrote(tmp_path):
    """A model that edits the visible tests to pass does not fool the hidden ones."""
    root = tmp_path / "suite" / "cheat"
    (root / "repo").mkdir(parents=True)
    (root / "hidden").mkdir()
    (root / "task.toml").write_text('problem = "make check.sh pass"\ntest_command = "sh check.sh"\n')
    (root / "repo" / "check.sh").write_text("exit 1\n")
    (root / "hidden" / "check.sh").write_text("exit 1\n")
    rec = replays(tmp_path / "rec", cheat=[xml("view_file", path="check.sh"), xml("write_file", path="check.sh", content="exit 0"),
                                           xml("run_command", command="sh check.sh"), xml("finish", summary="green")])
    suite = load_suite(str(tmp_path / "suite"), tmp_path)
    (result,) = run_suite(suite, config(rec), ReplayDirectory(rec), tmp_path / "work").attempts
    observation = [e for e in result["trajectory"] if e["kind"] == "observation"][-1]
    assert observation["ok"] and result["status"] == "failed" and result["hidden_tests"]["exit_code"] == 1


class ClockedBackend:
    """Yields two text chunks and usage; each event costs a known amount of fake time."""

    name = "clocked"

    def __init__(self, clock):
        self.clock = clock

    def generate(self, messages, tools, params):
        self.clock.advance(0.25)
        yield TextDelta("hello ")
        self.clock.advance(0.5)
        yield TextDelta("world")
        self.clock.advance(0.125)
        yield Usage(3, 2, forwards=1, seconds=0.7)
        yield Finish("stop")

    def close(self):
        pass


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


def test_timed_backend_counts_only_time_inside_the_model():
    clock = FakeClock()
    timed = TimedBackend(ClockedBackend(clock), clock)
    recorder = EventRecorder(clock, timed)
    for _ in timed.generate([], [], None):
        clock.advance(10.0)  # the loop's own work between events is not model time
    recorder.emit("model_turn", step=1, calls=[])
    assert recorder.events[0]["timing"] == {"model_seconds": 0.875, "first_token_seconds": 0.25, "engine_seconds": 0.7}
    assert recorder.events[0]["t"] == 40.875 and timed.name == "clocked"


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_ctrl_c_keeps_and_writes_the_results_so_far(tmp_path):
    for name in ("a-quick", "b-slow"):
        task = tmp_path / "suite" / name
        (task / "repo").mkdir(parents=True)
        (task / "repo" / "f.txt").write_text("x\n")
        (task / "task.toml").write_text('problem = "p"\ntest_command = "true"\n')
    rec = replays(tmp_path / "rec", **{"a-quick": [xml("finish", summary="done")],
                                       "b-slow": [xml("run_command", command="sleep 60"), xml("finish", summary="x")]})
    out = tmp_path / "results.json"
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "eval", str(tmp_path / "suite"), "--model", f"replay:{rec}",
                             "--json", str(out)], env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        assert wait_for(lambda: out.is_file() and len(json.loads(out.read_text())["tasks"]) == 1)
        time.sleep(1.0)  # b-slow is now inside `sleep 60`
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    data = json.loads(out.read_text())
    assert data["interrupted"] and not data["complete"]
    statuses = [(a["task"], a["status"]) for t in data["tasks"] for a in t["attempts"]]
    assert statuses == [("a-quick", "passed"), ("b-slow", "interrupted")]
    assert data["summary"]["attempts"] == 1 and data["summary"]["completion"]["pass@1"] == 1.0
    assert "Interrupted: these are the results" in stdout


def test_missing_recordings_are_refused_before_anything_runs(tmp_path):
    rec = replays(tmp_path / "rec", **{"py-semver": [xml("finish", summary="x")]})
    proc = run_cli("eval", "--model", f"replay:{rec}", "--task", "py-semver", "--task", "js-chunk")
    assert proc.returncode == 2 and "has no recording for task js-chunk" in proc.stderr


def test_unknown_suite_and_task_are_usage_errors(tmp_path):
    proc = run_cli("eval", str(tmp_path / "nope.jsonl"))
    assert proc.returncode == 2 and "suite not found" in proc.stderr
    proc = run_cli("eval", "--task", "no-such-task")
    assert proc.returncode == 2 and "has no task 'no-such-task'" in proc.stderr


def results_file(path: Path, model: str, passes: dict[str, list[bool]], seconds: float) -> Path:
    suite = load_suite(None, Path.cwd()).select(list(passes))
    attempts = [attempt(task, ok, seconds=seconds) for task, oks in passes.items() for ok in oks]
    for i, a in enumerate(attempts):
        a["repeat"] = i % 2 + 1
    write_results(path, EvalRecord(suite, model, 2, {}, attempts=attempts).to_json())
    return path


def test_compare_shows_metric_deltas_and_task_regressions(tmp_path):
    a = results_file(tmp_path / "a.json", "model-a", {"py-semver": [True, True], "js-chunk": [False, False]}, 2.0)
    b = results_file(tmp_path / "b.json", "model-b", {"py-semver": [True, False], "js-chunk": [True, True]}, 1.0)
    proc = run_cli("eval", "compare", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any("pass@1 " in l and "50.0%" in l and "75.0%" in l and "+25.0%" in l for l in lines), proc.stdout
    assert any("task latency median" in l and "2.00s" in l and "-1.00s" in l for l in lines), proc.stdout
    assert "Regressions (pass rate fell): py-semver" in proc.stdout
    assert "Improvements (pass rate rose): js-chunk" in proc.stdout
    strict = run_cli("eval", "compare", str(a), str(b), "--fail-on-regression")
    assert strict.returncode == 1
    same = run_cli("eval", "compare", str(a), str(a), "--fail-on-regression")
    assert same.returncode == 0 and "No task changed its pass rate." in same.stdout


def test_compare_rejects_files_that_are_not_results(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    proc = run_cli("eval", "compare", str(bad), str(bad))
    assert proc.returncode == 2 and "is not a clovercode eval results file" in proc.stderr
    proc = run_cli("eval", "compare", str(tmp_path / "none.json"), str(bad))
    assert proc.returncode == 2 and "results file not found" in proc.stderr


def test_tasks_needing_missing_programs_are_skipped_not_failed(tmp_path):
    for name, requires in (("needs-nothing", "[]"), ("needs-zork", '["zork-compiler-9000"]')):
        task = tmp_path / "suite" / name
        (task / "repo").mkdir(parents=True)
        (task / "repo" / "f.txt").write_text("x\n")
        (task / "task.toml").write_text(f'problem = "p"\ntest_command = "true"\nrequires = {requires}\n')
    rec = replays(tmp_path / "rec", **{"needs-nothing": [xml("finish", summary="done")]})
    out = tmp_path / "r.json"
    proc = run_cli("eval", str(tmp_path / "suite"), "--model", f"replay:{rec}", "--sandbox", "none", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "skipping needs-zork: zork-compiler-9000 not found" in proc.stdout
    assert "WARNING: --sandbox none" in proc.stdout and "sandbox none" in proc.stdout
    data = json.loads(out.read_text())
    assert data["skipped"] == {"needs-zork": "zork-compiler-9000 not found"} and data["complete"]
    assert [t["id"] for t in data["tasks"]] == ["needs-nothing"]
    alone = run_cli("eval", str(tmp_path / "suite"), "--task", "needs-zork", "--model", f"replay:{rec}")
    assert alone.returncode == 2 and "no task left to run" in alone.stderr


def test_patch_counts_commits_and_leaves_out_test_debris(tmp_path):
    repo = make_git_repo(tmp_path / "r")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "a.py").write_text("x = 1\n")
    git(repo, "add", "a.py")
    git(repo, "commit", "-qm", "the model committed this")
    (repo / "b.py").write_text("y = 2\n")
    (repo / "__pycache__").mkdir()
    (repo / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00junk")
    patch = changes(repo, base)
    assert "+++ b/a.py" in patch and "+++ b/b.py" in patch and "pycache" not in patch


def test_a_real_model_on_cpu_gets_every_metric_measured(tmp_path):
    """`--model tiny` computes for real (random weights, gibberish): nothing valid, nothing solved,
    but validity, recovery, latency, tokens/s and tokens per forward are all measured."""
    out = tmp_path / "tiny.json"
    proc = run_cli("eval", "--model", "tiny:context=8192", "--tasks", "2", "--max-steps", "2", "--json", str(out),
                   env=cli_env(CLOVERCODE_MAX_NEW_TOKENS="48"))
    assert proc.returncode == 0, proc.stderr
    s = json.loads(out.read_text())["summary"]
    assert s["attempts"] == 2 and s["completion"]["pass@1"] == 0.0
    assert s["validity"] == {"valid_turns": 0, "turns": 4, "rate": 0.0}
    assert s["recovery"]["failed"] == 4 and s["recovery"]["by_kind"]["invalid_call"]["failed"] == 4
    assert s["latency"]["step"]["model"]["median"] > 0 and s["latency"]["task"]["p95"] > 0
    engine = s["engine"]
    assert engine["tokens_per_second_source"] == "backend" and engine["tokens_per_second"] > 0
    assert engine["forwards"] > 0 and engine["tokens_per_forward"] > 0
    assert "tokens per forward" in proc.stdout and "format_errors" not in s["stop_reasons"]


def test_eval_against_an_openai_compatible_endpoint(tmp_path):
    """A real HTTP server on 127.0.0.1 (clovercode serve's app) replaying a recorded solution."""
    from clovercode.backends.replay import ReplayBackend
    from serve_helpers import running_server

    recording = Path(__file__).parent / "data" / "eval_replays" / "py-date-range.jsonl"
    out = tmp_path / "endpoint.json"
    with running_server(ReplayBackend(recording)) as app:
        proc = run_cli("eval", "--endpoint", f"http://127.0.0.1:{app.port}/v1", "--task", "py-date-range",
                       "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["settings"]["endpoint"].startswith("http://127.0.0.1:")
    (attempt,) = data["tasks"][0]["attempts"]
    assert attempt["status"] == "passed" and attempt["steps"] == 4
    assert data["summary"]["validity"] == {"valid_turns": 4, "turns": 4, "rate": 1.0}
    assert data["summary"]["engine"]["tokens_per_second_source"] == "backend"


def test_eval_check_on_a_swe_bench_style_row_with_gold_patch(tmp_path):
    repo, base = project_with_history(tmp_path)
    gold = git(repo, "diff", base, "HEAD")  # the later commit is the reference fix
    row = {"instance_id": "calc-1", "repo": "project", "base_commit": base, "problem_statement": "double() is off",
           "test_command": "python3 -m unittest -q {tests}", "FAIL_TO_PASS": '["test_hidden"]', "test_patch": TEST_PATCH,
           "patch": gold}
    bad = dict(row, instance_id="calc-2", patch="")  # no reference: checked only for failing as given
    broken = dict(row, instance_id="calc-3", test_patch="diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (row, bad, broken)))
    proc = run_cli("eval", "check", str(tmp_path / "s.jsonl"))
    assert proc.returncode == 1, proc.stderr
    assert "calc-1: ok" in proc.stdout and "calc-2: ok (no reference solution)" in proc.stdout
    assert "calc-3: unfair: task calc-3: the test patch does not apply" in proc.stdout

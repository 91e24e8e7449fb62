"""`clovercode eval --attempts N` (issue 47): every task runs as `fix --attempts N` runs it, and the
report gives pass@1 over the N attempts (c/n) and best-of-N: whether the attempt fix would publish,
chosen by the visible tests alone, passes the hidden tests. Real git workspaces and unittest runs;
replay recordings per attempt (``<task>.r<k>.jsonl``)."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
from conftest import tool_call_text as call
from conftest import write_replay
from rich.console import Console

from clovercode.eval.command import run_eval
from clovercode.eval.runner import diff_stats
from clovercode.ground.config import load_config

BUGGY = "def add(a, b):\n    return a - b\n"
VISIBLE = ("import unittest\n\nfrom calc import add\n\n\nclass Visible(unittest.TestCase):\n"
           "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")
HIDDEN = VISIBLE.replace("Visible", "Hidden") + "\n    def test_more(self):\n        self.assertEqual(add(-1, 1), 0)\n"
FIX = call("edit_file", path="calc.py", old_text="    return a - b", new_text="    return a + b")
HACK = call("edit_file", path="calc.py", old_text="    return a - b",  # fools the visible test only
            new_text="    return 5 if (a, b) == (2, 3) else a - b")
NOTE = call("edit_file", path="calc.py", old_text="def add(a, b):", new_text="# add\ndef add(a, b):")
FIX_AND_NOTE = call("edit_file", path="calc.py", old_text="def add(a, b):\n    return a - b",
                    new_text="# add\ndef add(a, b):\n    return a + b")
DONE = call("finish", summary="done")
VIEW = call("view_file", path="calc.py")  # an edit needs the file read first


def suite(tmp_path: Path) -> Path:
    """Two tasks, the same bug: ``good`` (the fix wins the choice) and ``fooled`` (a hack that passes
    only the visible test has the smaller diff, so it is chosen and fails the hidden tests)."""
    for name in ("good", "fooled"):
        task = tmp_path / "suite" / name
        (task / "repo").mkdir(parents=True)
        (task / "hidden").mkdir()
        (task / "repo" / "calc.py").write_text(BUGGY)
        (task / "repo" / "test_calc.py").write_text(VISIBLE)
        (task / "hidden" / "test_calc.py").write_text(HIDDEN)
        (task / "task.toml").write_text(f'problem = "add() subtracts"\ntest_command = "{sys.executable} -m unittest -q"\n'
                                        'max_steps = 4\n')
    rec = tmp_path / "rec"
    rec.mkdir()
    write_replay(rec / "good.r1.jsonl", VIEW, NOTE, DONE, DONE, DONE)
    write_replay(rec / "good.r2.jsonl", VIEW, FIX, DONE)
    write_replay(rec / "fooled.r1.jsonl", VIEW, HACK, DONE)
    write_replay(rec / "fooled.r2.jsonl", VIEW, FIX_AND_NOTE, DONE)
    return rec


@pytest.mark.slow  # eight unittest runs in four workspaces (about 2.5 s on a loaded machine)
def test_eval_attempts_reports_pass_at_1_and_the_chosen_attempts_verdict(tmp_path):
    rec = suite(tmp_path)
    cfg = load_config(None, os.environ, {"model": f"replay:{rec}", "sandbox": "none"})
    out, screen = tmp_path / "results.json", io.StringIO()
    code = run_eval(str(tmp_path / "suite"), cfg, Console(file=screen, width=200), cwd=tmp_path, attempts=2,
                    json_out=out)
    data = json.loads(out.read_text())
    assert code == 0 and data["best_of"] == 2 and data["repeats"] == 2
    tasks = {t["id"]: t for t in data["tasks"]}
    seen = {name: [(a["attempt"], a["seed"], a["temperature"], a["verdict"], a["status"]) for a in t["attempts"]]
            for name, t in tasks.items()}
    assert seen == {"good": [(1, 1, 0.0, "unverified", "failed"), (2, 2, 0.7, "fixed", "passed")],
                    "fooled": [(1, 1, 0.0, "fixed", "failed"), (2, 2, 0.7, "fixed", "passed")]}
    assert [a["diff"] for a in tasks["fooled"]["attempts"]] == [{"files": 1, "added": 1, "removed": 1},
                                                                 {"files": 1, "added": 2, "removed": 1}]
    assert tasks["good"]["best_of_n"] == {"chosen": 2, "why": "the best verdict: fixed", "passed": True}
    assert tasks["fooled"]["best_of_n"] == {"chosen": 1, "why": "fixed, with the smallest diff", "passed": False}
    done = data["summary"]["completion"]
    assert (done["pass@1"], done["pass@2"], done["best_of_n"], done["best_of_n_passed"]) == (0.5, 1.0, 0.5, 1)
    text = screen.getvalue()
    assert "pass@1 50.0% · pass@2 100.0% · best-of-2 50.0% (1/2 tasks" in text, text
    assert "best of 2" in text and "#2 ✓" in text and "#1 ✗" in text


def test_attempts_and_repeats_together_are_a_usage_error(tmp_path):
    from typer.testing import CliRunner

    from clovercode.front.cli import app

    result = CliRunner().invoke(app, ["eval", "--model", "replay:none", "--attempts", "2", "--repeats", "3"])
    assert result.exit_code == 2 and "--attempts N and --repeats K do not go together" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(app, ["eval", "--model", "replay:none", "--attempts", "17"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_diff_stats_count_the_change_not_its_headers():
    patch = ("diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n-x = 1\n+x = 2\n y = 3\n"
             "diff --git a/b.py b/b.py\nnew file mode 100644\n--- /dev/null\n+++ b/b.py\n@@ -0,0 +1,2 @@\n"
             "+--- not a header\n++++ nor this\n")
    assert diff_stats(patch) == {"files": 2, "added": 3, "removed": 1}
    assert diff_stats("") == {"files": 0, "added": 0, "removed": 0}

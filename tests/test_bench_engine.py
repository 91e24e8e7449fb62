"""`clovercode bench engine` on the tiny trained model: every schedule, the scaling table, the targets.
(Figures are not asserted: speed targets live in the benchmark, not in tests.)"""

import json

import pytest

from clovercode.bench.engine import check_targets
from conftest import run_cli

pytestmark = pytest.mark.slow


def test_bench_engine_reports_every_schedule_as_json():
    proc = run_cli("bench", "engine", "--prompts", "2", "--thresholds", "0.9,0.7", "--lengths", "64,256",
                   "--max-new-tokens", "48", "--repeats", "1", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    names = [row["schedule"] for row in report["schedules"]]
    assert names == ["AR B=1", "1 token/pass B=16", "threshold 0.9 B=16", "threshold 0.7 B=16",
                     "AR B=1 + grammar", "threshold 0.9 B=16 + grammar"]
    for row in report["schedules"]:
        assert row["forwards"] > 0 and row["tokens"] > 0
        assert 0 <= row["valid_calls"] <= 1 and 0 <= row["agreement"] <= 1
    one_per_pass = report["schedules"][1]
    # One position per pass: about one token per forward (the last, uncommitted block does a bit better).
    assert one_per_pass["agreement"] == 1.0 and one_per_pass["tokens_per_forward"] < 1.5
    assert [row["prompt_tokens"] for row in report["scaling"]] == [64, 256]
    assert {c["target"].split(" ")[0] for c in report["targets"]} >= {"tokens", "valid", "agreement", "wall", "cached"}
    grammar = [c["target"] for c in report["targets"] if "+ grammar" in c["target"]]
    assert len(grammar) == 4 and any("0.9× unconstrained" in t for t in grammar)


def test_bench_engine_rejects_bad_lists():
    proc = run_cli("bench", "engine", "--thresholds", "high")
    assert proc.returncode == 2 and "bad --thresholds" in proc.stderr
    for flag, value, said in (("--lengths", "0", "prompt lengths must be ≥ 1"), ("--thresholds", "0.9,1.5", "in (0, 1]")):
        proc = run_cli("bench", "engine", flag, value)  # refused before the model loads, not a crash after
        assert proc.returncode == 2 and said in proc.stderr and "internal error" not in proc.stderr


def test_targets_are_judged_against_the_issue():
    report = {"schedules": [{"schedule": "threshold 0.9 B=16", "tokens_per_forward": 2.5, "valid_calls": 0.95,
                             "agreement": 0.97, "speedup": 1.5}],
              "scaling": [{"prompt_tokens": 2048, "ratio": 0.1}]}
    assert [c["met"] for c in check_targets(report)] == [True, True, True, False, True]


def test_grammar_rows_are_judged_against_their_free_twins():
    report = {"schedules": [{"schedule": "AR B=1", "tokens_per_s": 100.0, "exact_calls": 0.9},
                            {"schedule": "AR B=1 + grammar", "tokens_per_s": 85.0, "exact_calls": 0.95}],
              "scaling": []}
    assert [(c["value"], c["met"]) for c in check_targets(report)] == [(0.85, False), (0.95, True)]

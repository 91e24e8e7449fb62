"""`clovercode bench engine` on the tiny trained model: every schedule, the scaling table, the targets;
its AR baseline is true autoregressive decoding; it loads models as every command does.
(Figures are not asserted: speed targets live in the benchmark, not in tests.)"""

import io
import json

import pytest
import torch
from rich.console import Console

from clovercode.bench.engine import ar_overrides, check_targets, held_out_turns, render_report
from clovercode.engine.chat import render_prompt
from clovercode.engine.config import EngineConfig
from clovercode.engine.denoiser import CachedDenoiser
from clovercode.engine.engine import Engine
from clovercode.ground.messages import Message
from conftest import cli_env, run_cli

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
    assert {c["target"].split(" ")[0] for c in report["targets"]} >= {"tokens", "valid", "agreement", "tokens/s", "cached"}
    ar = report["schedules"][0]
    assert ar["block_size"] == 1 and ar["speedup"] == 1.0  # every speed-up is against true AR decoding
    assert all(0 <= row["exact_calls"] <= 1 for row in report["schedules"])
    held = report["held_out"]
    assert held["kept"] == 2 and held["drawn"] == held["kept"] + held["excluded"]
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
                             "agreement": 0.97, "speedup": 2.9}],
              "scaling": [{"prompt_tokens": 2048, "ratio": 0.1}]}
    checks = check_targets(report)
    assert [c["met"] for c in checks] == [True, True, True, False, True]
    assert checks[3]["target"] == "tokens/s at threshold 0.9 ≥ 3× autoregressive (B = 1)"


def test_grammar_rows_are_judged_against_their_free_twins():
    report = {"schedules": [{"schedule": "AR B=1", "tokens_per_s": 100.0, "exact_calls": 0.9},
                            {"schedule": "AR B=1 + grammar", "tokens_per_s": 85.0, "exact_calls": 0.95}],
              "scaling": []}
    assert [(c["value"], c["met"]) for c in check_targets(report)] == [(0.85, False), (0.95, True)]


def test_the_report_headlines_the_speedup_over_ar_and_says_what_was_excluded():
    row = {"prefill_ms": 4.0, "first_block_ms": 5.0, "tokens_per_forward": 1.0, "forwards": 10, "agreement": 1.0}
    report = {"model": "clover-tiny", "device": "cpu", "dtype": "float32", "prompts": 32, "max_new_tokens": 128,
              "schedules": [{**row, "schedule": "AR B=1", "tokens_per_s": 400.0, "valid_calls": 1.0,
                             "exact_calls": 0.969, "speedup": 1.0},
                            {**row, "schedule": "threshold 0.9 B=16", "tokens_per_s": 1400.0, "valid_calls": 0.97,
                             "exact_calls": 0.906, "speedup": 3.5}],
              "held_out": {"drawn": 36, "kept": 32, "excluded": 4, "reasons": {
                  "copies no corpus value": {"count": 3, "example": "Run `git status`."},
                  "copies only values the training split also holds": {"count": 1, "example": "Where is main defined?"}}},
              "scaling": [], "targets": [], "options": {"passes_per_block": 4}}
    out = io.StringIO()
    render_report(report, Console(file=out, width=200, color_system=None))
    text = " ".join(out.getvalue().split())
    assert "threshold 0.9 B=16: 3.50× the tokens/s of autoregressive decoding (B = 1)" in text
    assert "exact calls 90.6 % vs 96.9 %" in text
    assert "32 kept of 36 drawn from the eval split; 4 excluded as they can occur in the training data" in text
    assert "3 copies no corpus value (e.g. “Run `git status`.”)" in text
    assert "× AR" in text and "1.00×" in text and "3.50×" in text


@pytest.fixture(scope="module")
def tiny():
    return Engine.open("clover-tiny", EngineConfig(), Console(file=io.StringIO()))


def test_the_ar_baseline_is_transformers_greedy_generate(tiny):
    plan = tiny.plan(**ar_overrides(tiny))
    assert plan.block_size == 1
    for turn, _ in held_out_turns(3, seed=0):
        prompt = tiny.encode(render_prompt(tiny.tokenizer, [Message("user", turn.request)], (), False))
        ours = tiny.generate(prompt, plan, tiny.stops(("</tool_call>",)), denoiser=CachedDenoiser(tiny.model))
        assert ours.tokens and ours.stats.forwards == len(ours.tokens) - 1  # one commit pass per token
        theirs = tiny.model.generate(torch.tensor([prompt]), max_new_tokens=len(ours.tokens), do_sample=False,
                                     eos_token_id=None, pad_token_id=tiny.tokenizer.pad_token_id)
        assert ours.tokens == theirs[0, len(prompt):].tolist()


def test_bench_engine_honours_trust_remote_code(tmp_path):
    from test_engine_remote import _make_remote_dir

    from clovercode.trust.models import local_entry

    folder = _make_remote_dir(tmp_path / "remote")
    args = ("bench", "engine", "--model", str(folder), "--prompts", "1", "--thresholds", "0.9", "--lengths", "32",
            "--max-new-tokens", "4", "--repeats", "1", "--no-grammar", "--json")
    modules = {"HF_MODULES_CACHE": str(tmp_path / "modules")}
    refused = run_cli(*args, env=cli_env(**modules), timeout=600)
    assert refused.returncode == 5 and "trust_remote_code" in refused.stderr
    entry = local_entry(folder)
    assert entry in refused.stderr
    trusted = run_cli(*args, env=cli_env(CLOVERCODE_ENGINE_TRUST_REMOTE_CODE=entry, **modules), timeout=600)
    assert trusted.returncode == 0, trusted.stderr
    report = json.loads(trusted.stdout)
    assert report["options"]["trust_remote_code"] == [entry] and [r["schedule"] for r in report["schedules"]][0] == "AR B=1"

"""scripts/gpu_check.sh: its --device cpu dry run (the same code as on the GPU, tiny sizes) produces a
complete report whose exactness checks pass, without the packages the GPU image lacks; and the parts
of the report computed from the architecture."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clovercode.bench.gpuarch import CLOVER_SIZES, layer_types, parameter_counts, text_config
from clovercode.bench.gpulatency import batch_gain

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpucheck") / "report.json"
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--device", "cpu", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    return done, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.slow
def test_the_dry_run_writes_a_complete_report_and_its_exactness_checks_pass(dry_run):
    done, report = dry_run
    assert done.returncode == 0, done.stderr[-3000:]
    assert report["dry_run"] and report["errors"] == {} and report["passed"]
    assert report["foreign_imports"] == []  # nothing the GPU image lacks (jsonschema, llguidance, ...)
    subagents = report["subagents"]  # children batched vs one after another: the same text, fewer forwards
    assert subagents["same_outputs"] and [r["n"] for r in subagents["rows"]] == [1, 2]
    assert subagents["line"].startswith("batched vs sequential (N=2): ")
    env = report["environment"]
    assert env["device"] == "cpu" and set(env["fast_kernels"]) == {"fla", "causal_conv1d", "in_use"}

    exact = report["exactness"]
    assert exact["passed"] and all(check["passed"] for check in exact["checks"])
    names = [check["name"] for check in exact["checks"]]
    assert "fp32 greedy: cached = reference" in names and "bf16 vs fp32 logits (cached)" in names
    assert "float32 logits: static_eager vs cached" in names
    assert exact["model"]["layer_types"] == ["linear_attention", "full_attention"]


@pytest.mark.slow
def test_the_dry_run_times_every_batch_and_prompt_length(dry_run):
    latency = dry_run[1]["latency"]
    assert latency["model"]["parameters_full_architecture"] == {"total_b": 34.66, "active_b": 3.454}
    passes = latency["passes"]
    for prompt in (64, 256):
        modes = {(p["mode"], p["rows"], p.get("kind")) for p in passes if p["prompt_tokens"] == prompt}
        assert ("prefill", 1, None) in modes and ("dynamic_eager", 1, "denoise") in modes
        for rows in (1, 16, 32):
            assert {("eager", rows, "denoise"), ("eager", rows, "commit")} <= modes
    assert all(p["median_ms"] > 0 for p in passes) and latency["skipped"] == []
    assert [g["mode"] for g in latency["batch_1_vs_8"]] == ["eager"]  # graphs only where CUDA is


@pytest.mark.slow
def test_the_dry_run_measures_clover_tiny_and_the_static_cache_decodes_the_same(dry_run):
    tiny = dry_run[1]["clover_tiny"]
    assert [(r["schedule"], r["cache"]) for r in tiny["rows"]] == [
        ("AR B=1", "dynamic"), ("AR B=1", "static"), ("threshold 0.9 B=16", "dynamic"),
        ("threshold 0.9 B=16", "static")]
    assert all(r["same_tokens_as_dynamic"] and r["tokens_per_s"] > 0 for r in tiny["rows"])
    assert tiny["rows"][2]["tokens_per_forward"] > 2 * tiny["rows"][0]["tokens_per_forward"]


def test_the_plan_only_run_prints_clovers_memory_plan_at_8_by_128k_under_120_gib():
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--device", "cpu", "--plan-only", "--model",
                           "clover"], cwd=ROOT, env={**os.environ, "PYTHON": sys.executable}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("memory plan for Clover-35B-A3B: 40 layers (10 full attention, 30 linear attention)")
    assert "KV bytes per token: 20,480 (10 layers × 2 × 2 heads × 256 × 2 B)" in lines
    assert "slots: 8 (asked 8) × 131,584 tokens = capacity 1,052,672 tokens (max context 131,072)" in lines
    assert "weights: 65.19 GiB" in lines and "KV cache: 20.08 GiB" in lines
    assert any(line.startswith("linear-attention state: 0.48 GiB") for line in lines)
    assert any(line.startswith("device: 139.0 GiB free × utilisation 0.9") and "headroom" in line for line in lines)
    assert lines[-1].startswith("planned peak GiB: ") and float(lines[-1].split(": ")[1]) <= 120
    assert "torch" not in done.stderr  # nothing was loaded


@pytest.mark.slow
def test_the_dry_run_report_carries_the_plan_it_printed_first(dry_run):
    done, report = dry_run
    printed = done.stderr.splitlines()
    peak = next(i for i, line in enumerate(printed) if line.startswith("planned peak GiB: "))
    assert peak < next(i for i, line in enumerate(printed) if line.startswith("[gpu_check] environment"))
    assert report["memory_plan"]["planned_peak_gib"] == float(printed[peak].split(": ")[1])
    assert report["memory_plan"]["slots"] == 8 and report["memory_plan"]["fits"]


def test_asking_for_cuda_without_a_gpu_says_so_and_points_to_the_dry_run():
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--skip", "exactness,latency,tiny"],
                          cwd=ROOT, env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert "no CUDA device here" in done.stderr and "--device cpu is the dry run" in done.stderr


def test_clovers_architecture_is_35b_total_and_about_3b_active():
    config = text_config(CLOVER_SIZES)
    assert config.layer_types.count("full_attention") == 10 and len(config.layer_types) == 40
    counts = parameter_counts(config)
    assert 34 < counts["total_b"] < 36 and 3 < counts["active_b"] < 3.6
    assert layer_types(2) == ["linear_attention", "full_attention"] and layer_types(3)[-1] == "full_attention"
    assert layer_types(8) == ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"]


def test_batch_gain_compares_rows_in_one_forward_with_one_forward_per_row():
    passes = [{"mode": m, "kind": "denoise", "prompt_tokens": 2048, "rows": r, "median_ms": ms}
              for m, r, ms in [("eager", 1, 40.0), ("eager", 8, 80.0), ("graphs", 1, 5.0), ("graphs", 8, 10.0),
                               ("graphs", 16, 12.0)]]
    gains = batch_gain(passes, 2048, (1, 8))
    assert [(g["mode"], g["throughput_gain"], g["8_forwards_of_1_ms"]) for g in gains] == [
        ("eager", 4.0, 320.0), ("graphs", 4.0, 40.0)]


def test_a_card_plan_weighs_the_quantized_weights_and_ends_with_the_longest_context(capsys):
    from clovercode.bench import gpucheck

    code = gpucheck.main(["--device", "cpu", "--plan-only", "--model", "clover", "--gpu-memory", "24",
                          "--quantization", "int4"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and lines[0].startswith("memory plan for Clover-35B-A3B (int4 weights)")
    weights = float(next(line for line in lines if line.startswith("weights: ")).split()[1])
    assert 17 < weights < 20  # 35B parameters, the experts at ~4.1 bits, embeddings and the rest as loaded
    assert lines[-2].startswith("planned peak GiB: ") and float(lines[-2].split(": ")[1]) <= 21.6  # 0.9 × 24
    # the output projection stays bf16 (no per-forward dequantized copy): 0.47 GiB of the card's 24
    assert lines[-1].startswith("max context per slot: ") and int(lines[-1].split(": ")[1]) >= 40960
    gpucheck.main(["--device", "cpu", "--plan-only", "--gpu-memory", "48", "--quantization", "int8"])
    lines = capsys.readouterr().out.splitlines()
    assert float(lines[-2].split(": ")[1]) <= 43.2 and int(lines[-1].split(": ")[1]) >= 131072
    gpucheck.main(["--device", "cpu", "--plan-only", "--gpu-memory", "24", "--quantization", "none"])
    assert capsys.readouterr().out.splitlines()[-1] == "max context per slot: 0"  # bf16 does not fit a 24 GB card

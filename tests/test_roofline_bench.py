"""`clovercode bench engine --roofline` and the GPU check's roofline section, on the tiny widths: the
operation counter by part (bench/opcount.py), the report's last two lines, exactness of each experts
path against its reference (bench/gpuroofline.py). Figures are not asserted: they live in the bench."""

import pytest
import torch

from clovercode.bench import gpuroofline, opcount
from clovercode.bench import roofline as bench
from clovercode.engine.quantize import quantize_model
from conftest import run_cli


def tiny_model(experts: str | None = None, layers: int = 2):
    config = bench.clover_width_config(layers, "tiny")
    if experts is not None:
        config._experts_implementation = experts
    return bench.build(config, "cpu", torch.float32, seed=0)


def moe_ops(model, tokens: torch.Tensor) -> dict:
    with torch.inference_mode(), opcount.counting(model) as counter:
        model(input_ids=tokens)
    return opcount.summary(counter, 2)


@pytest.mark.slow  # 3-20 s on the shared 2-core machine (first dispatch mode, model builds, a CLI process)
def test_views_and_allocations_are_not_launches_and_parts_follow_the_modules():
    counter = opcount.OpCounter()
    x = torch.ones(4, 4)
    with counter:
        y = x.view(16)  # a view: metadata only
        torch.empty(3)
        z = y * 2 + 1  # two kernels
        z.add_(1)  # in place: a kernel
        z.nonzero()  # a kernel that makes the host wait
    assert counter.ops["the rest"] == 4 and counter.views["the rest"] >= 1
    assert counter.syncs["the rest"] == 1


@pytest.mark.slow  # 3-20 s on the shared 2-core machine (first dispatch mode, model builds, a CLI process)
def test_a_per_expert_loop_costs_operations_per_hit_expert_and_grouped_gemms_do_not():
    tokens = torch.randint(3, 500, (1, 32), generator=torch.Generator().manual_seed(0))
    loop = moe_ops(tiny_model("eager"), tokens)
    grouped = moe_ops(tiny_model(), tokens)
    assert set(loop["ops"]) == set(opcount.PARTS) and loop["ops"]["LM head"] >= 1
    assert loop["ops"]["GDN/attention"] == grouped["ops"]["GDN/attention"] > 0  # the same mixers either way
    # 8 experts, top 2, 32 tokens: all 8 hit in both layers; the loop runs ~8 operations for each
    assert loop["experts_ops_per_layer"] > grouped["experts_ops_per_layer"] + 5 * 8
    assert grouped["experts_ops_per_layer"] <= bench.TARGET_EXPERT_OPS


@pytest.mark.parametrize("mode", ["none", "int8", "int4", "fp8"])
def test_each_experts_path_agrees_with_its_reference_on_the_same_weights(mode):
    model = tiny_model()
    model = bench.quantized_copy(model.to(torch.bfloat16), mode, "cpu")
    check = gpuroofline.experts_exactness(model, tokens=32)
    assert check["passed"] and check["experts_hit"] == 8, check
    assert ("QuantizedExperts" in check["path"]) == (mode != "none")


def test_the_exactness_check_fails_when_the_kernel_path_is_wrong():
    model = bench.quantized_copy(tiny_model().to(torch.bfloat16), "int8", "cpu")
    block = next(m for m in model.modules() if hasattr(m, "experts") and hasattr(m, "gate"))
    forward = block.experts.forward
    block.experts.forward = lambda h, i, w: forward(h, i, w) * 1.1  # a kernel 10 % off
    assert not gpuroofline.experts_exactness(model, tokens=32)["passed"]


def test_a_quantized_copy_leaves_the_model_it_copies_unchanged():
    model = tiny_model().to(torch.bfloat16)
    before = {name: p.clone() for name, p in model.named_parameters()}
    copy = bench.quantized_copy(model, "int4", "cpu")
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())
    assert {type(m).__name__ for m in copy.modules()} >= {"QuantizedExperts"}
    assert "QuantizedExperts" not in {type(m).__name__ for m in model.modules()}


@pytest.mark.slow
def test_the_report_ends_with_the_two_lines_the_issue_reads():
    report = bench.run(bench.RooflineOptions(width="tiny", modes=("none", "int8"), prefill=16, context=16, repeats=1))
    lines = bench.render(report)
    assert lines[-2].startswith("experts ops per layer: ") and lines[-1].startswith("block pass measured/floor: ")
    worst = max(row["ops"]["experts_ops_per_layer"] for row in report["modes"])
    assert float(lines[-2].split(": ")[1]) == worst
    assert float(lines[-1].split(": ")[1]) == report["summary"]["block_pass_ratio"] > 0
    for row in report["modes"]:
        assert [p["pass"] for p in row["passes"]] == ["prefill chunk 16", "block pass batch 1", "block pass batch 8"]
        assert all(p["measured_ms"] > 0 and p["floor_ms"] > 0 for p in row["passes"])
        assert row["passes"][1]["experts_hit_routed"] <= 2 * 8
    assert {t["target"] for t in report["summary"]["targets"]} >= {
        "experts ops per layer ≤ 40 (none)", "block pass measured/floor ≤ 2.0 (int8)"}
    # which kernel the int8 experts ran is said next to their operations (native where built, else torch's)
    int8 = next(row for row in report["modes"] if row["mode"] == "int8")
    assert int8["experts_kernel"] and f"experts kernel: {int8['experts_kernel']}" in "\n".join(lines)


@pytest.mark.slow  # 3-20 s on the shared 2-core machine (first dispatch mode, model builds, a CLI process)
def test_the_cli_refuses_an_unknown_mode_before_building_anything():
    proc = run_cli("bench", "engine", "--roofline", "--quant", "none,int3", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "int3" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_the_gpu_checks_roofline_section_dry_run_writes_its_report(tmp_path):
    from clovercode.bench import gpucheck

    out = tmp_path / "report.json"
    code = gpucheck.main(["--device", "cpu", "--skip", "exactness,latency,tiny,subagents", "--roofline",
                          "--roofline-modes", "none,int4", "--out", str(out)])
    import json

    report = json.loads(out.read_text())
    assert code == 0 and report["passed"] and report["errors"] == {}, report["errors"]
    section = report["roofline"]
    assert [row["mode"] for row in section["modes"]] == ["none", "int4"] and section["skipped"] == []
    for row in section["modes"]:
        assert row["experts_exactness"]["passed"] and row["load_s"] >= row["quantize_s"] >= 0
        assert [p["pass"] for p in row["passes"]] == ["prefill chunk 64", "block pass batch 1", "block pass batch 8"]
        assert row["ops"]["experts_ops_per_layer"] > 0
    assert section["gdn_exactness"] == {"skipped": "no CUDA device (dry run)"}
    assert section["device"]["source"].startswith("measured: ")  # no GPU: the CPU probe

"""The one-shot GPU check (scripts/gpu_check.sh): exactness on the device, per-pass latency on Clover's
architecture (eager vs CUDA graphs, batch 1 vs 8), fast-kernel use, and clover-tiny tokens/s, as
one JSON report. Before anything is allocated it prints the memory plan (engine/memplan.py) of the real
model (``--model clover``: Clover-35B-A3B) at ``--plan-context`` tokens × ``--plan-slots`` slots; with
``--plan-only`` that plan is all it does (no torch needed), ending with ``planned peak GiB: X``.

It runs with what the GPU machine's image holds (Python 3.12, torch, transformers, triton,
accelerate, rich) from a plain checkout: it imports the engine (torch, transformers, rich) and nothing
of the harness. ``--device cpu`` is the dry run: the same code with tiny sizes, for the tests.

    python -m clovercode.bench.gpucheck --device cuda --out report.json
    python -m clovercode.bench.gpucheck --device cpu --plan-only --model clover
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from typing import Any, Callable, Sequence

# Packages clovercode uses elsewhere that the GPU image does not have: the check must not need them.
NOT_ON_DEVICE = ("jsonschema", "llguidance", "prompt_toolkit", "git", "tomlkit", "tree_sitter", "mcp", "pexpect",
                 "pyte", "typer", "gguf")
# clover-tiny's held-out requests (bench/toolcorpus.py, split "eval", seed 13), fixed here because
# building them needs jsonschema.
TINY_REQUESTS = (
    "What files are under test/test_tomllib?",
    "In lib2to3/fixes/fix_imports.py, replace `self.assertEqual(foo(), 3)` with `self.assertEqual(_call(), 3)`.",
    "Show me lib2to3/fixer_base.py.",
    "Search the *.py files for test_top.",
    "Run `ruff check .` with a timeout of 120 seconds.",
    "We are done. Finish with the summary: Fixed filelineno in mailbox.py.",
    "Search the test_*.py files for test_open_connection.",
    "Run `python test/ssl_servers.py` with a timeout of 60 seconds.",
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_check", description="Exactness and speed of the engine on a GPU.")
    p.add_argument("--device", default="cuda", help="cuda (the check) or cpu (the dry run: tiny sizes)")
    p.add_argument("--out", default="-", help="where the JSON report goes (- = stdout)")
    p.add_argument("--layers", type=int, default=None, help="layers of the Clover-shaped model (40 = all; cpu: 2)")
    p.add_argument("--prompts", default=None, help="prompt lengths, comma-separated (default 2048,32768; cpu 64,256)")
    p.add_argument("--rows", default="1,16,32", help="batch rows per forward, comma-separated")
    p.add_argument("--block", type=int, default=16, help="block size of the timed passes")
    p.add_argument("--repeats", type=int, default=None, help="timed passes per measurement (default 7; cpu 2)")
    p.add_argument("--budget-s", type=float, default=None, help="latency measurements stop starting after this "
                   "(default 300; cpu: none)")
    p.add_argument("--skip", default="", help="sections to leave out: exactness,latency,tiny,subagents")
    p.add_argument("--quantized", action="store_true", help="also run the quantized section (bench/gpuquant.py: "
                   "bf16 vs int4 vs fp8; needs torchao, and llguidance + jsonschema for its constrained calls)")
    p.add_argument("--quantized-layers", type=int, default=None, help="layers of its Clover-shaped model (default 4; cpu 2)")
    p.add_argument("--roofline", action="store_true", help="also run the roofline section (bench/gpuroofline.py: "
                   "none/int8/int4/fp8 block passes against their floor, device peak, exactness per kernel path; "
                   "int8/int4/fp8 need torchao)")
    p.add_argument("--roofline-layers", type=int, default=None, help="layers of its Clover-shaped model "
                   "(default 40 = all; cpu 2)")
    p.add_argument("--roofline-modes", default="none,int8,int4,fp8", help="weights modes it measures, comma-separated")
    p.add_argument("--roofline-budget-s", type=float, default=300.0, help="modes stop starting after this many "
                   "seconds of the section (listed as skipped)")
    p.add_argument("--model", default="clover", choices=("clover",), help="whose memory plan to print (its config "
                   "ships with clovercode: engine/data/clover-35b-a3b.json)")
    p.add_argument("--plan-only", action="store_true", help="print the memory plan and stop (nothing loaded)")
    p.add_argument("--plan-slots", type=int, default=8, help="sequences decoded together in the plan")
    p.add_argument("--plan-context", type=int, default=131072, help="positions per sequence in the plan")
    p.add_argument("--plan-free-gib", type=float, default=None, help="free device memory the plan assumes "
                   f"(default: the CUDA device's, measured; on cpu an H200's {H200_FREE_GIB} GiB)")
    p.add_argument("--plan-block", type=int, default=32, help="block size in the plan (the engine's default for "
                   "diffusion models)")
    p.add_argument("--plan-utilization", type=float, default=0.9, help="share of the free memory the plan may use")
    p.add_argument("--quantization", default="none", choices=("none", "int8", "int4", "fp8"),
                   help="weights mode of the plan (engine.quantization)")
    p.add_argument("--gpu-memory", type=float, default=None, help="plan for a card of this many GiB: one "
                   "sequence at the longest context that fits, then 'max context per slot: N'")
    return p.parse_args(argv)


# An H200 has 141 GB (143,771 MiB) of HBM; about 139 GiB of it is free to a process once the CUDA
# context exists (what torch.cuda.mem_get_info reported there): what a --device cpu plan assumes.
H200_FREE_GIB = 139.0


def memory_plan(args: argparse.Namespace) -> Any:
    """The plan of ``args.model`` on this device (or an H200, for the dry run), allocating nothing but
    the CUDA context that measuring free memory needs."""
    from clovercode.engine.memplan import GiB, clover_shape, max_context, plan

    free = args.gpu_memory if args.gpu_memory is not None else args.plan_free_gib
    if free is None:
        free = H200_FREE_GIB if not args.device.startswith("cuda") else _cuda_free_gib(args.device)
    shape = clover_shape(args.quantization)
    if args.gpu_memory is None:
        return plan(shape, free_bytes=int(free * GiB), utilisation=args.plan_utilization, slots=args.plan_slots,
                    max_context=args.plan_context, block=args.plan_block)
    # a card: one sequence (the REPL, fix), no older prompts kept, as long as it fits
    context = max_context(shape, free_bytes=int(free * GiB), utilisation=args.plan_utilization, block=args.plan_block)
    return plan(shape, free_bytes=int(free * GiB), utilisation=args.plan_utilization, slots=1,
                max_context=max(context, 512), block=args.plan_block, prompt_cache_tokens=0, single=True)


def plan_text(args: argparse.Namespace, plan: Any) -> str:
    lines = plan.lines()
    if args.gpu_memory is not None:
        lines.append(f"max context per slot: {plan.max_context if plan.fits else 0}")
    return "\n".join(lines)


def _cuda_free_gib(device: str) -> float:
    import torch

    from clovercode.engine.memplan import GiB

    return torch.cuda.mem_get_info(torch.device(device))[0] / GiB


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    dry = args.device == "cpu"
    if args.plan_only and dry:
        plan = memory_plan(args)
        print(plan_text(args, plan), flush=True)
        return 0 if plan.fits else 1
    if not dry and not _cuda_ok(args.device):
        _say(f"--device {args.device}: no CUDA device here (torch sees none); --device cpu is the dry run")
        return 2
    started = time.monotonic()
    report: dict[str, Any] = {"schema": 1, "started": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), "dry_run": dry, "errors": {}}
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    plan = memory_plan(args)  # before any allocation: what the real model would need here
    print(plan_text(args, plan), file=sys.stdout if args.plan_only else sys.stderr, flush=True)
    report["memory_plan"] = plan.as_dict()
    if args.plan_only:
        return 0 if plan.fits else 1
    _section(report, "environment", lambda: environment(args.device))
    if "exactness" not in skip:
        _section(report, "exactness", lambda: _exactness(args.device, dry))
    if "latency" not in skip:
        _section(report, "latency", lambda: latency(args, dry))
    if "tiny" not in skip:
        _section(report, "clover_tiny", lambda: tiny_speed(args.device, dry))
    if "subagents" not in skip:
        _section(report, "subagents", lambda: subagents_speed(args.device, dry))
    # before the quantized section, which needs packages carried as wheels (docs/engine.md)
    report["foreign_imports"] = sorted({m.split(".")[0] for m in sys.modules} & set(NOT_ON_DEVICE))
    if args.quantized:
        from clovercode.bench import gpuquant

        _section(report, "quantized", lambda: gpuquant.run(args.device, dry, TINY_REQUESTS, args.quantized_layers, _say))
    if args.roofline:
        from clovercode.bench import gpuroofline

        modes = tuple(m.strip() for m in args.roofline_modes.split(",") if m.strip())
        _section(report, "roofline", lambda: gpuroofline.run(args.device, dry, args.roofline_layers, modes,
                                                             args.roofline_budget_s, _say))
    exact = report.get("exactness", {}).get("passed", "exactness" in skip)  # a skipped section fails nothing
    report["passed"] = bool(exact) and not report["errors"] and _roofline_exact(report)
    report["seconds"] = round(time.monotonic() - started, 1)
    text = json.dumps(report, indent=2)
    if args.out == "-":
        print(text)
    else:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
        _say(f"report written to {args.out} ({report['seconds']} s, passed: {report['passed']})")
    return 0 if report["passed"] else 1


def _roofline_exact(report: dict[str, Any]) -> bool:
    """Every kernel path the roofline section compared with its reference agreed (none compared: True)."""
    section = report.get("roofline") or {}
    checks = [row.get("experts_exactness", {}) for row in section.get("modes", [])] + [section.get("gdn_exactness", {})]
    return all(check.get("passed", True) for check in checks)


def _cuda_ok(device: str) -> bool:
    import torch

    return device.startswith("cuda") and torch.cuda.is_available()


def _say(text: str) -> None:
    print(f"[gpu_check] {text}", file=sys.stderr, flush=True)


def _section(report: dict[str, Any], name: str, run: Callable[[], Any]) -> None:
    """One failing section is reported; the others still run."""
    _say(f"{name}…")
    started = time.monotonic()
    try:
        report[name] = run()
    except Exception as exc:  # the report says what broke; a traceback on stderr says where
        import traceback

        traceback.print_exc(file=sys.stderr)
        report["errors"][name] = f"{type(exc).__name__}: {str(exc).strip()[:500]}"
    _say(f"{name} done in {time.monotonic() - started:.1f} s")


def environment(device: str) -> dict[str, Any]:
    import platform

    import torch
    import transformers

    from clovercode.bench.gpuarch import fast_kernels

    found: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                             "transformers": transformers.__version__, "device": device,
                             "fast_kernels": fast_kernels()}
    try:
        import triton

        found["triton"] = triton.__version__
    except ImportError:
        found["triton"] = None
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        found.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda,
                     bf16=torch.cuda.is_bf16_supported())
    return found


def _exactness(device: str, dry: bool) -> dict[str, Any]:
    from clovercode.bench import gpuexact

    if dry:  # the recomputing reference is O(n²) per block: keep the CPU run short
        from clovercode.bench.gpuarch import TINY_SIZES

        return gpuexact.run(device, prompt_tokens=16, new_tokens=24, sizes={**TINY_SIZES, "vocab_size": 256})
    return gpuexact.run(device)


def latency(args: argparse.Namespace, dry: bool) -> dict[str, Any]:
    import torch

    from clovercode.bench.gpuarch import CLOVER_SIZES, TINY_SIZES, parameter_counts, random_model, text_config
    from clovercode.bench.gpulatency import Budget, measure

    layers = args.layers or (2 if dry else 40)
    config = text_config(TINY_SIZES if dry else CLOVER_SIZES, layers)
    full = text_config(CLOVER_SIZES)
    prompts = [int(x) for x in (args.prompts or ("64,256" if dry else "2048,32768")).split(",")]
    rows = [int(x) for x in args.rows.split(",")]
    dtype = torch.float32 if dry else torch.bfloat16
    started = time.monotonic()
    model = random_model(config, args.device, dtype)
    built_s = round(time.monotonic() - started, 1)
    # the dry run checks that every measurement runs: no budget, so a loaded machine skips nothing
    budget = Budget(args.budget_s if args.budget_s is not None else (float("inf") if dry else 300))
    result = measure(model, args.device, prompts, rows, args.block, args.repeats or (2 if dry else 7), budget)
    experts = getattr(model.config, "_experts_implementation", None)
    del model
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return {"model": {"architecture": "Qwen3.5-MoE (Clover-35B-A3B / Qwen3.6-35B-A3B sizes)" if not dry else
                      "Qwen3.5-MoE, tiny sizes (dry run)", "layers": layers, "layer_types": config.layer_types,
                      "dtype": str(dtype).removeprefix("torch."), "experts_implementation": experts,
                      "attention": config._attn_implementation, "built_s": built_s,
                      "parameters_full_architecture": parameter_counts(full),
                      "parameters_built": parameter_counts(config)},
            **result}


def tiny_speed(device: str, dry: bool) -> dict[str, Any]:
    """clover-tiny's engine tokens/s: AR (block 1) and threshold 0.9 (block 16), dynamic cache vs the
    static cache (CUDA graphs on CUDA), the fastest of the repeats per prompt."""
    from clovercode.engine.config import EngineConfig
    from clovercode.engine.denoiser import CachedDenoiser
    from clovercode.engine.engine import Engine
    from clovercode.engine.graphs import StaticDenoiser

    engine = Engine.open("clover-tiny", EngineConfig(device=device, max_new_tokens=48 if dry else 128))
    requests, repeats = (TINY_REQUESTS[:2], 1) if dry else (TINY_REQUESTS, 3)
    stops = engine.stops(("</tool_call>",))
    graphs = device.startswith("cuda")
    static = {1: StaticDenoiser(engine.model, graphs=graphs), 16: StaticDenoiser(engine.model, graphs=graphs)}
    schedules = {"AR B=1": {"block_size": 1}, "threshold 0.9 B=16": {"block_size": 16, "threshold": 0.9}}
    rows = []
    for name, overrides in schedules.items():
        plan = engine.plan(**overrides)
        for cache in ("dynamic", "static"):
            tokens = forwards = 0
            seconds = 0.0
            outputs = []
            for request in requests:
                text = engine.tokenizer.apply_chat_template([{"role": "user", "content": request}], tokenize=False,
                                                            add_generation_prompt=True)
                prompt = engine.encode(text)
                runs = [engine.generate(prompt, plan, stops, denoiser=CachedDenoiser(engine.model) if cache == "dynamic"
                                        else static[plan.block_size]) for _ in range(repeats + (not dry))]
                best = min(runs, key=lambda r: r.stats.decode_s)
                tokens += best.stats.new_tokens
                forwards += best.stats.forwards
                seconds += best.stats.decode_s
                outputs.append(best.tokens)
            rows.append({"schedule": name, "cache": cache, "new_tokens": tokens, "forwards": forwards,
                         "tokens_per_s": round(tokens / seconds, 1) if seconds else None,
                         "tokens_per_forward": round(tokens / forwards, 3) if forwards else None, "outputs": outputs})
    for row in rows:  # the static cache must not change what is decoded
        twin = next(r for r in rows if r["schedule"] == row["schedule"] and r["cache"] == "dynamic")
        row["same_tokens_as_dynamic"] = row["outputs"] == twin["outputs"]
    ar = next(r for r in rows if r["schedule"] == "AR B=1" and r["cache"] == "dynamic")["tokens_per_s"]
    for row in rows:
        row["speedup_vs_ar_dynamic"] = round(row["tokens_per_s"] / ar, 2) if ar and row["tokens_per_s"] else None
        del row["outputs"]
    graph_errors = {str(size): d.graph_error for size, d in static.items() if d.graph_error}
    info = {"device": engine.info.device, "dtype": engine.info.dtype, "prompts": len(requests), "repeats": repeats,
            "rows": rows, "graph_errors": graph_errors}
    engine.close()
    return info


def subagents_speed(device: str, dry: bool) -> dict[str, Any]:
    """Subagents on clover-tiny: N children's turns one after another vs batched (bench/subagentdecode.py)."""
    from clovercode.backends.embedded import EmbeddedBackend
    from clovercode.bench.subagentdecode import decode_bench
    from clovercode.engine.config import EngineConfig
    from clovercode.engine.engine import Engine

    backend = EmbeddedBackend(Engine.open("clover-tiny", EngineConfig(device=device)))
    try:
        report = decode_bench(backend, (1, 2) if dry else (1, 2, 4, 8), 1 if dry else 2, 16 if dry else 64)
    finally:
        backend.close()
    _say(report["line"])
    return report


if __name__ == "__main__":
    sys.exit(main())

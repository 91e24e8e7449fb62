"""The engine's exactness checks on the check's device, in float32 and bfloat16.

The CPU tests prove the algorithm in float64 (tests/test_engine_exact.py, tests/test_engine_graphs.py).
On a GPU the kernels change (cuBLAS, SDPA's fused kernels, grouped GEMMs), and bf16 rounds every
activation to 8 bits of mantissa, so the checks here say what still holds there:

* float32 (TF32 off): the cached engine decodes exactly the recomputing reference's tokens with the
  same number of forwards; so do the static-cache passes, eager and as CUDA graphs.
* every pass of a teacher-forced decode (the same blocks fed to each denoiser) is compared by its
  logits, relative to the largest fp32 logit: cached vs reference and static vs cached within
  ``FP32_TOLERANCE`` in float32 and ``BF16_TOLERANCE`` in bfloat16, and bf16 vs fp32 within
  ``BF16_TOLERANCE``;
* bf16 picks the fp32 token wherever fp32's choice is clear: every position whose fp32 top-2 margin
  is larger than twice the largest bf16 error. Closer calls may go either way in bf16, and greedy
  bf16 paths are reported (agreement with fp32), not required to match.
"""

from __future__ import annotations

from typing import Any, Callable

FP32_TOLERANCE = 1e-3
BF16_TOLERANCE = 0.05
BLOCK = 8
PROMPT_TOKENS = 40
NEW_TOKENS = 48


def _denoisers(model: Any, graphs_ok: bool) -> dict[str, Callable[[], Any]]:
    from clovercode.engine.denoiser import CachedDenoiser, RecomputeDenoiser
    from clovercode.engine.graphs import StaticDenoiser

    found = {"cached": lambda: CachedDenoiser(model), "reference": lambda: RecomputeDenoiser(model),
             "static_eager": lambda: StaticDenoiser(model, graphs=False, min_capacity=256)}
    if graphs_ok:
        found["static_graphs"] = lambda: StaticDenoiser(model, graphs=True, min_capacity=256)
    return found


def _decode(denoiser: Any, prompt: list[int], mask_id: int, new_tokens: int) -> Any:
    from clovercode.engine.decoder import DecodePlan, decode
    from clovercode.engine.stops import Stops

    plan = DecodePlan(block_size=BLOCK, mask_id=mask_id, strategy="threshold", threshold=0.9, max_new_tokens=new_tokens)
    return decode(denoiser, prompt, plan, lambda ids: "", Stops())


def teacher_forced(denoiser: Any, prompt: list[int], tokens: list[int], mask_id: int) -> Any:
    """Logits of every pass when ``tokens`` are fed block by block: the prefill's last row, each
    block's first denoising pass (its first token known, the rest masked) and each commit."""
    import torch

    state = denoiser.prefill(prompt)
    rows = [state.last_logits[None].float()]
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        block = torch.tensor(tokens[start:start + BLOCK])
        masked = torch.full_like(block, mask_id)
        masked[0] = block[0]
        rows.append(denoiser.denoise(state, masked).float())
        state = denoiser.commit(state, block)
        rows.append(state.last_logits[None].float())
    return torch.cat([r.cpu() for r in rows])


def relative_error(got: Any, expected: Any, scale: float) -> float:
    return float((got - expected).abs().max()) / scale


def run(device: str, prompt_tokens: int = PROMPT_TOKENS, new_tokens: int = NEW_TOKENS, seed: int = 0,
        sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    import torch

    from clovercode.bench.gpuarch import EXACT_SIZES, random_model, text_config

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 here
    torch.backends.cudnn.allow_tf32 = False
    # Batched GEMMs over gathered expert weights: every dtype, no host sync (capturable). The default
    # grouped GEMMs are exercised by the latency model, in bf16.
    config = text_config(sizes or EXACT_SIZES, experts="batched_mm")
    mask_id = config.mask_token_id
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, config.vocab_size - 2, (prompt_tokens,), generator=generator).tolist()
    graphs_ok = device.startswith("cuda")
    report: dict[str, Any] = {"model": {"layers": config.num_hidden_layers, "hidden": config.hidden_size,
                                        "layer_types": config.layer_types, "experts_implementation": "batched_mm"},
                              "block_size": BLOCK,
                              "prompt_tokens": prompt_tokens, "new_tokens": new_tokens,
                              "tolerances": {"fp32": FP32_TOLERANCE, "bf16": BF16_TOLERANCE}}
    logits: dict[str, dict[str, Any]] = {}
    greedy: dict[str, dict[str, Any]] = {}
    path: list[int] = []
    errors: dict[str, str | None] = {}
    for dtype_name in ("float32", "bfloat16"):
        model = random_model(config, device, getattr(torch, dtype_name), head_scale=40.0)
        makers = _denoisers(model, graphs_ok)
        greedy[dtype_name] = {}
        for name, make in makers.items():
            denoiser = make()
            result = _decode(denoiser, prompt, mask_id, new_tokens)
            greedy[dtype_name][name] = {"tokens": result.tokens, "forwards": result.stats.forwards}
            errors[f"{dtype_name}/{name}"] = getattr(denoiser, "graph_error", None)
        if dtype_name == "float32":
            path = greedy["float32"]["reference"]["tokens"]
        logits[dtype_name] = {name: teacher_forced(make(), prompt, path, mask_id) for name, make in makers.items()}
        del model
    report["checks"] = _judge(greedy, logits)
    report["greedy"] = {d: {n: {"forwards": r["forwards"], "new_tokens": len(r["tokens"]),
                                "agreement_with_fp32_reference": _agreement(r["tokens"], path)}
                            for n, r in rows.items()} for d, rows in greedy.items()}
    report["graph_errors"] = {k: v for k, v in errors.items() if v}
    report["passed"] = all(c["passed"] for c in report["checks"])
    return report


def _agreement(tokens: list[int], reference: list[int]) -> float:
    same = sum(a == b for a, b in zip(tokens, reference))
    return round(same / max(len(tokens), len(reference), 1), 4)


def _judge(greedy: dict[str, dict[str, Any]], logits: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    fp32, bf16 = logits["float32"], logits["bfloat16"]
    scale = float(fp32["reference"].abs().max())
    reference = greedy["float32"]["reference"]
    for name, row in greedy["float32"].items():
        if name != "reference":
            checks.append({"name": f"fp32 greedy: {name} = reference", "passed": row == reference,
                           "detail": f"{len(row['tokens'])} tokens, {row['forwards']} forwards "
                                     f"(reference {len(reference['tokens'])}, {reference['forwards']})"})
    for dtype_name, tolerance in (("float32", FP32_TOLERANCE), ("bfloat16", BF16_TOLERANCE)):
        table = logits[dtype_name]
        for name, base in (("cached", "reference"), ("static_eager", "cached"), ("static_graphs", "cached")):
            if name in table:
                error = relative_error(table[name], table[base], scale)
                checks.append({"name": f"{dtype_name} logits: {name} vs {base}", "passed": error <= tolerance,
                               "relative_error": float(f"{error:.3g}"), "tolerance": tolerance})
    error = relative_error(bf16["cached"], fp32["cached"], scale)
    checks.append({"name": "bf16 vs fp32 logits (cached)", "passed": error <= BF16_TOLERANCE,
                   "relative_error": float(f"{error:.3g}"), "tolerance": BF16_TOLERANCE})
    top2 = fp32["cached"].topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 2 * error * scale
    same = bf16["cached"].argmax(-1) == fp32["cached"].argmax(-1)
    checks.append({"name": "bf16 picks fp32's token wherever fp32's choice is clear",
                   "passed": bool(same[clear].all()), "clear_positions": int(clear.sum()),
                   "positions": int(clear.numel()), "agreement_all_positions": round(float(same.float().mean()), 4)})
    return checks

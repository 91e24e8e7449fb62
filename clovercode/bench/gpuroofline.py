"""gpu_check's roofline section (``scripts/gpu_check.sh --roofline``, issue 44): bench/roofline.py on the
GPU at Clover's full depth, with what only a device shows.

A Clover-shaped model (random weights, Clover's widths, ``layers`` layers: 40 = all, ~70 GB in bf16)
is built directly on the device in bf16; each quantized mode is a copy sharing its parameters,
quantized in place (engine/quantize.py). Per mode (none, int8, int4, fp8): load seconds (building the
weights on the device, then quantizing), the device peak of the passes (the mode's weights and the
passes' transient memory: the bf16 weights the copies share are held throughout and not counted),
block pass ms at batch 1 and 8 against the floor (the GPU's datasheet figures, engine/roofline.py),
tokens/s at clover-tiny's forwards per token, the operations per MoE layer, and exactness: the MoE
experts module the mode runs against a float32 reference loop over the same (dequantized) weights,
on the same hidden states and routing; and, where flash-linear-attention is installed, its chunked
gated delta rule against transformers' PyTorch fallback. ``--device cpu`` is the dry run (tiny widths).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any, Callable

from clovercode.bench import roofline as bench
from clovercode.engine import roofline

EXPERTS_TOLERANCE = 0.05  # relative to the reference's largest value: bf16 products, float32 reference
GDN_TOLERANCE = 0.05


def experts_reference(experts: Any, hidden: Any, index: Any, weights: Any) -> Any:
    """The experts' output computed the plain way in float32: for each routed (token, slot), its
    expert's gate/up and down matrices — dequantized where the module holds them quantized."""
    import torch

    from clovercode.engine import qexperts

    def matrix(name: str, expert: int) -> Any:
        buffers = getattr(experts, "_buffers", {})
        if f"{name}_qdata" in buffers:
            return qexperts.unpack(buffers[f"{name}_qdata"][expert], buffers[f"{name}_scale"][expert], torch.float32)
        return getattr(experts, name)[expert].float()

    out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    x = hidden.float()
    for expert in sorted(set(index.flatten().tolist())):
        token, slot = torch.where(index == expert)
        gate, up = torch.nn.functional.linear(x[token], matrix("gate_up_proj", expert)).chunk(2, dim=-1)
        y = torch.nn.functional.linear(experts.act_fn(gate) * up, matrix("down_proj", expert))
        out.index_add_(0, token, y * weights[token, slot, None].float())
    return out


def experts_exactness(model: Any, tokens: int, seed: int = 0) -> dict[str, Any]:
    """The first MoE layer's experts module on random hidden states, routed by its own router, against
    :func:`experts_reference`; the error relative to the reference's largest value."""
    import torch

    block = next(m for m in model.modules() if hasattr(m, "experts") and hasattr(m, "gate"))
    param = next(block.gate.parameters())
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, param.shape[-1], generator=generator).to(device=param.device, dtype=param.dtype)
    with torch.inference_mode():
        _, weights, index = block.gate(hidden)
        got = block.experts(hidden, index, weights).float()
        want = experts_reference(block.experts, hidden, index, weights)
    scale = want.abs().max().clamp(min=1e-12)
    error = float((got - want).abs().max() / scale)
    return {"path": type(block.experts).__name__ + _implementation(block.experts), "tokens": tokens,
            "experts_hit": int(index.unique().numel()), "max_error_vs_reference": round(error, 5),
            "passed": error <= EXPERTS_TOLERANCE}


def _implementation(experts: Any) -> str:
    config = getattr(experts, "config", None)
    chosen = getattr(config, "_experts_implementation", None) if config is not None else None
    return f" ({chosen})" if chosen else ""


def gdn_exactness(device: str, dtype: Any) -> dict[str, Any]:
    """flash-linear-attention's chunked gated delta rule against transformers' PyTorch fallback, on
    random inputs of Clover's head sizes; skipped (with the reason) where fla is not installed."""
    import torch

    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception as exc:  # not installed, or broken on this machine: say which
        return {"skipped": f"flash-linear-attention not importable ({type(exc).__name__})"}
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import torch_chunk_gated_delta_rule

    generator = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, generator=generator).to(device=device, dtype=dtype)

    q, k = rand(1, 256, 32, 128), rand(1, 256, 32, 128)
    q, k = torch.nn.functional.normalize(q.float(), dim=-1).to(dtype), torch.nn.functional.normalize(k.float(), dim=-1).to(dtype)
    v = rand(1, 256, 32, 128)
    g = -torch.rand(1, 256, 32, generator=generator).to(device=device, dtype=torch.float32)
    beta = torch.rand(1, 256, 32, generator=generator).to(device=device, dtype=dtype)
    want, _ = torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, output_final_state=False)
    got, _ = chunk_gated_delta_rule(q, k, v, g=g, beta=beta, output_final_state=False)
    error = float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp(min=1e-12))
    return {"path": "fla chunk_gated_delta_rule", "max_error_vs_reference": round(error, 5),
            "passed": error <= GDN_TOLERANCE}


def run(device: str, dry: bool, layers: int | None, modes: tuple[str, ...], budget_s: float,
        say: Callable[[str], None] = print) -> dict[str, Any]:
    """The section's report: bench/roofline.py's, plus load seconds, device peak and exactness per mode."""
    import torch

    options = bench.RooflineOptions(layers=layers or (2 if dry else 40), modes=modes, device=device,
                                    prefill=64 if dry else 2048, context=64 if dry else 2048,
                                    repeats=1 if dry else 3, width="tiny" if dry else "clover")
    cuda = device.startswith("cuda")
    config = bench.clover_width_config(options.layers, options.width)
    report: dict[str, Any] = {"options": asdict(options), "layer_types": config.layer_types,
                              "forwards_per_token": options.forwards_per_token, "modes": [], "skipped": []}
    floor_device = bench.device_figures(options)
    report["device"] = floor_device.as_dict()
    deadline = time.monotonic() + budget_s
    started = time.perf_counter()
    base = bench.build(config, device, torch.bfloat16, options.seed)
    bench._sync(device)
    report["build_s"] = round(time.perf_counter() - started, 1)
    say(f"roofline: built {options.layers} layers in {report['build_s']} s")
    context = bench.context_state(base, options)
    for mode in modes:
        if time.monotonic() > deadline:
            report["skipped"].append(mode)
            continue
        try:
            report["modes"].append(_mode(base, mode, options, floor_device, cuda, context))
            report["modes"][-1]["load_s"] = round(report["build_s"] + report["modes"][-1]["quantize_s"], 1)
        except Exception as exc:  # the report says what broke; the other modes still run
            import sys
            import traceback

            traceback.print_exc(limit=-3, file=sys.stderr)
            report["modes"].append({"mode": mode, "error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"})
        say(f"roofline: {mode} done")
        if cuda:
            torch.cuda.empty_cache()
    report["gdn_exactness"] = gdn_exactness(device, torch.bfloat16) if cuda else {"skipped": "no CUDA device (dry run)"}
    report["summary"] = bench.summary(report)
    return report


def _mode(base: Any, mode: str, options: bench.RooflineOptions, device: roofline.Device, cuda: bool,
          context: Any) -> dict[str, Any]:
    import torch

    from clovercode.engine import memory

    started = time.perf_counter()
    model = bench.quantized_copy(base, mode, options.device)
    bench._sync(options.device)
    quantize_s = time.perf_counter() - started
    weights = memory.weights_bytes(model)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    row = bench.measure_mode(model, mode, options, context)
    if cuda:  # this mode's weights plus what its passes needed on top
        row["device_peak_gib"] = round((weights + torch.cuda.max_memory_allocated() - before) / 2 ** 30, 3)
    row.update(weights_gib=round(weights / 2 ** 30, 3), quantize_s=round(quantize_s, 1),
               experts_exactness=experts_exactness(model, tokens=32 if options.width == "tiny" else 256))
    bench.finish(row, model.config, options, device)
    return row

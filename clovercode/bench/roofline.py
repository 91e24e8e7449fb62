"""``clovercode bench engine --roofline``: how far each pass of a Clover-width model is from its floor.

A Qwen3.5-MoE (transformers' class, the one Clover maps to) at Clover's real widths — hidden 2048, 256
experts of 512 (top 8) plus a shared expert, Gated DeltaNet and attention heads as Clover's, LM head
248,320 rows — but only ``layers`` layers (default 2: one Gated DeltaNet, one full attention), random
weights, built directly in ``dtype`` (bf16: ~5.5 GB at 2 layers, of which the LM head and the
embeddings are 1 GB each and the experts 1.6 GB a layer). Per weights mode (none, int8, int4, fp8;
quantized in place by engine/quantize.py, as the engine does while loading) it times a prefill chunk
and a 32-position block pass at batch 1 and 8 after a cached context, and sets each against its floor
(engine/roofline.py) from the loaded weights' real bytes: measured/floor, tokens/s against floor
tokens/s. It counts the operations a batch-1 block pass dispatches, by part (bench/opcount.py). The
same code runs on a GPU (scripts/gpu_check.sh --roofline, bench/gpuroofline.py).
"""

from __future__ import annotations

import gc
import statistics
import time
import zlib
from dataclasses import asdict, dataclass
from typing import Any, Callable

from clovercode.engine import roofline

ALL_MODES = ("none", "int8", "int4", "fp8")
POOL = 1_000_003  # random values tiled into the weights: a prime length, so no two experts align alike
# The targets (issue 44): the MoE block's operations per layer, and block pass measured/floor
TARGET_EXPERT_OPS = 40
TARGET_RATIO = {"none": 2.0, "int8": 2.0}


@dataclass(frozen=True)
class RooflineOptions:
    layers: int = 2
    modes: tuple[str, ...] = ALL_MODES
    device: str = "cpu"
    dtype: str = "bfloat16"
    prefill: int = 256  # positions of the timed prefill chunk
    context: int = 256  # cached positions before the timed block passes
    batches: tuple[int, ...] = (1, 8)
    repeats: int = 3  # timed passes each (after a warm-up); the median counts
    forwards_per_token: float = roofline.FORWARDS_PER_TOKEN
    seed: int = 0
    count_ops: bool = True
    width: str = "clover"  # "tiny": the dry run's widths (bench/gpuarch.py TINY_SIZES), for the tests

    def __post_init__(self) -> None:
        unknown = [m for m in self.modes if m not in ALL_MODES]
        if unknown or not self.modes:
            raise ValueError(f"modes must be among {', '.join(ALL_MODES)}, got {', '.join(self.modes) or 'none'}")
        if self.layers < 2:
            raise ValueError("at least 2 layers: one Gated DeltaNet, one full attention")
        if min(self.prefill, self.context, self.repeats, *self.batches) < 1:
            raise ValueError("prefill, context, repeats and batches must be ≥ 1")


def clover_width_config(layers: int, width: str = "clover") -> Any:
    from clovercode.bench.gpuarch import CLOVER_SIZES, TINY_SIZES, text_config

    return text_config(TINY_SIZES if width == "tiny" else CLOVER_SIZES, layers)


def build(config: Any, device: str, dtype: Any, seed: int = 0) -> Any:
    """The model with random weights, fast: parameters are allocated uninitialised and every matrix is
    tiled from one pool of N(0, 0.02²) values (norms, A_log and dt_bias keep their constructor values);
    the init that draws 2.6 billion normals took ~40 s of a loaded 2-core CPU."""
    import torch
    from transformers.initialization import no_init_weights
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeForCausalLM

    from clovercode.bench.gpuarch import _building

    generator = torch.Generator().manual_seed(seed)
    pool = (torch.randn(POOL, generator=generator) * 0.02).to(device=device, dtype=dtype)
    with _building(device, dtype), no_init_weights(), torch.no_grad():
        model = Qwen3_5MoeForCausalLM(config)
        for name, param in model.named_parameters():
            if param.dim() >= 2:
                _tile(param.data, pool, zlib.crc32(name.encode()))
    model.eval()
    engine_paths(model, device)
    return model


def engine_paths(model: Any, device: str) -> None:
    """What engine/loading.py sets on a loaded model besides its weights, so the bench times the
    engine's passes: the matmul forms of the LM head and of the unquantized experts on this device, and
    the Gated DeltaNet layers' CPU kernel."""
    from clovercode.engine import expertpath, gdncpu, weightsfirst

    weightsfirst.install_head(model, device)
    gdncpu.install(model, device)
    expertpath.apply_unquantized(model, device.split(":")[0], expertpath.capability_of(device))


def _tile(tensor: Any, pool: Any, start: int) -> None:
    flat, length = tensor.view(-1), pool.numel()
    done, offset = 0, start % length
    while done < flat.numel():
        take = min(length - offset, flat.numel() - done)
        flat[done:done + take].copy_(pool[offset:offset + take])
        done, offset = done + take, 0


def quantized_copy(model: Any, mode: str, device: str) -> Any:
    """``model`` in ``mode``, leaving ``model`` as it is: a copy of the modules that shares every
    parameter with it, quantized in place (engine/quantize.py makes new tensors for what it converts
    and drops the copy's references to the originals). Building the bf16 weights once matters on a
    loaded CPU: first touching 5.5 GB of fresh pages took 40-80 s there."""
    import copy

    from clovercode.engine.quantize import quantize_model

    if mode == "none":
        return model
    shared = {id(p): p for p in model.parameters()}
    clone = copy.deepcopy(model, memo=shared)
    quantize_model(clone, mode, device)
    return clone


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def timed(run: Callable[[], Any], device: str, repeats: int, slow_s: float = 2.0) -> tuple[float, float, int]:
    """Fastest and median seconds of up to ``repeats`` calls after one warm-up call, and how many were
    timed. The warm-up is never skipped: on the CPU the first call at a shape builds oneDNN kernels
    (a bf16 block pass took 9.1 s, then 3.0 s, then 0.9 s). After a timed call of ``slow_s`` or more no
    more are timed (a quantized pass through today's per-expert loop takes 10-100 s on a loaded 2-core
    CPU). The fastest is the least disturbed on a shared machine, as the device probe's is."""
    run()
    samples: list[float] = []
    for _ in range(repeats):
        _sync(device)
        started = time.perf_counter()
        run()
        _sync(device)
        samples.append(time.perf_counter() - started)
        if samples[-1] >= slow_s:
            break
    return min(samples), statistics.median(samples), len(samples)


class RouterPicks:
    """The distinct experts the routers pick during the passes it is active for, per MoE layer: marked
    in a device tensor per layer (no host sync inside the timed passes), counted on exit."""

    def __init__(self, model: Any):
        self.model = model
        self.hit: dict[int, Any] = {}
        self.handles: list[Any] = []

    def __enter__(self) -> "RouterPicks":
        import torch

        blocks = [m for m in self.model.modules() if hasattr(m, "experts") and hasattr(m, "gate")]
        for layer, module in enumerate(blocks):
            device = next(module.gate.parameters()).device
            self.hit[layer] = torch.zeros(int(module.experts.num_experts), dtype=torch.bool, device=device)

            def mark(mod: Any, args: Any, out: Any, layer: int = layer) -> None:
                self.hit[layer][out[2].flatten()] = True

            self.handles.append(module.gate.register_forward_hook(mark))
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self.handles:
            handle.remove()

    def counts(self) -> list[int]:
        return [int(self.hit[layer].sum()) for layer in range(len(self.hit))]


def context_state(model: Any, options: RooflineOptions) -> Any:
    """The cached context the block passes run after (a prefill of random tokens), made once with the
    unquantized model and shared by every mode: its keys, values and states are the same shapes and
    dtype in every mode, and a quantized prefill through today's expert loop costs a pass of its own."""
    import torch

    from clovercode.engine.denoiser import CachedDenoiser

    ids = torch.randint(3, model.config.vocab_size - 3, (options.context,), generator=torch.Generator().manual_seed(
        options.seed + 2))
    with torch.inference_mode():
        return CachedDenoiser(model).prefill(ids.tolist())


def measure_mode(model: Any, mode: str, options: RooflineOptions, context: Any) -> dict[str, Any]:
    """One weights mode: the prefill chunk and the block passes after ``context`` timed (their floors
    are set by :func:`finish`, once the device's figures are final), and the operations of a batch-1
    block pass by part. The block holds random tokens, so its positions route like distinct tokens (a
    block of identical mask tokens routes most positions alike and reads far fewer experts)."""
    import torch

    from clovercode.bench import opcount
    from clovercode.engine import staticcache
    from clovercode.engine.denoiser import CachedDenoiser
    from clovercode.engine.graphs import StaticPasses

    config = model.config
    generator = torch.Generator().manual_seed(options.seed + 1)

    def ids(*shape: int) -> Any:
        return torch.randint(3, config.vocab_size - 3, shape, generator=generator)

    passes: list[dict[str, Any]] = []
    ops = None
    with torch.inference_mode():
        chunk = ids(options.prefill).tolist()  # a fresh denoiser each time: no kept prompt to reuse
        fastest, median, count = timed(lambda: CachedDenoiser(model).prefill(chunk), options.device, options.repeats)
        passes.append({"kind": "prefill", "rows": 1, "seconds": fastest, "median_s": median, "samples": count})
        for batch in options.batches:
            kv = staticcache.build(context.cache, batch, -(-(options.context + roofline.BLOCK) // 256) * 256)
            static = StaticPasses(model, kv, graphs=False)
            block = ids(batch, roofline.BLOCK).to(options.device)
            with RouterPicks(model) as picks:
                fastest, median, count = timed(lambda: static.run("denoise", block, options.context), options.device,
                                               options.repeats)
            passes.append({"kind": "block", "rows": batch, "seconds": fastest, "median_s": median, "samples": count,
                           "routed": picks.counts()})
            if batch == 1 and options.count_ops:  # after the timed passes: the counter slows the host down
                with opcount.counting(model) as counter:
                    static.run("denoise", block, options.context)
                moe_layers = sum(1 for m in model.modules() if hasattr(m, "experts") and hasattr(m, "gate"))
                ops = opcount.summary(counter, moe_layers)
            del kv, static
    bpp = roofline.measured_bytes_per_parameter(model)
    row = {"mode": mode, "bytes_per_parameter": {g: round(v, 4) for g, v in bpp.items()}, "timed": passes, "ops": ops}
    from clovercode.engine import gdnkernels

    row["gdn_kernel"] = gdnkernels.summary(options.device.split(":")[0], gdnkernels.kernels_in_use(model))
    if mode == "int8" and options.device == "cpu":  # which int8 kernels ran (engine/int8cpu.py)
        from clovercode.engine import int8cpu

        row["experts_kernel"] = int8cpu.kernel(model.dtype)
        row["linears_kernel"] = int8cpu.linear_kernel(model.dtype)
    return row


def finish(row: dict[str, Any], config: Any, options: RooflineOptions, device: roofline.Device) -> None:
    """Each timed pass of ``row`` against its floor on ``device``: ``ratio`` is measured / the floor of
    the experts the routers really picked, ``ratio_uniform`` against uniform routing's expectation."""
    import torch

    dims = roofline.Dims.from_config(config)
    dtype_bytes = torch.tensor([], dtype=getattr(torch, options.dtype)).element_size()
    bpp = row["bytes_per_parameter"]
    row["passes"] = []
    for t in row.pop("timed"):
        p = roofline.prefill(options.prefill) if t["kind"] == "prefill" else roofline.block(t["rows"], options.context)
        cost = roofline.pass_cost(dims, p, bpp, dtype_bytes)
        seconds, floor = t["seconds"], cost.floor_s(device)
        out = {**cost.as_dict(device), "measured_ms": round(1000 * seconds, 2), "samples": t["samples"],
               "median_ms": round(1000 * t["median_s"], 2), "ratio_uniform": round(seconds / floor, 2)}
        if t.get("routed"):
            routed = roofline.pass_cost(dims, p, bpp, dtype_bytes, experts_hit=t["routed"])
            out.update(experts_hit_routed=sum(t["routed"]), gb_routed=round(routed.total_bytes / 1e9, 4),
                       floor_ms_routed=round(1000 * routed.floor_s(device), 3))
            floor = routed.floor_s(device)
        out["ratio"] = round(seconds / floor, 2)
        if p.causal:
            out.update(tokens_per_s=round(p.positions / seconds, 1), floor_tokens_per_s=round(p.positions / floor, 1))
        else:  # a block pass yields rows / forwards-per-token tokens
            per = options.forwards_per_token
            out.update(tokens_per_s=round(p.rows / (per * seconds), 1), floor_tokens_per_s=round(p.rows / (per * floor), 1))
        row["passes"].append(out)


def device_figures(options: RooflineOptions, best: roofline.Device | None = None) -> roofline.Device:
    """The table's figures for a known GPU; else a probe of this device in the run's dtype, keeping the
    best bandwidth and peak of this probe and ``best`` (the probe runs between modes: on a shared CPU
    the least disturbed moment is the machine's capability)."""
    import torch

    if options.device.startswith("cuda"):
        known = roofline.known_device(torch.cuda.get_device_name(torch.device(options.device)))
        if known is not None:
            return known
    found = roofline.probe(options.device, getattr(torch, options.dtype))
    if best is None:
        return found
    return roofline.Device(found.name, max(found.bandwidth, best.bandwidth), max(found.peak_flops, best.peak_flops),
                           found.source.replace("fastest of", "best of the run's probes, fastest of"))


def machine() -> dict[str, Any]:
    import os
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "cores": os.cpu_count(), "load_average": round(load, 2) if load is not None else None}


def run(options: RooflineOptions, say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    import torch

    config = clover_width_config(options.layers, options.width)
    sizes = {k: getattr(config, k) for k in ("hidden_size", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                                             "vocab_size")}
    report: dict[str, Any] = {"options": asdict(options), "machine": machine(), "layer_types": config.layer_types,
                              "sizes": sizes,
                              "torch": torch.__version__, "modes": []}
    device = device_figures(options)
    started = time.perf_counter()
    base = build(config, options.device, getattr(torch, options.dtype), options.seed)
    report["build_s"] = round(time.perf_counter() - started, 1)
    say(f"built the {options.dtype} model in {report['build_s']} s")
    context = context_state(base, options)
    for mode in options.modes:
        try:
            started = time.perf_counter()
            model = quantized_copy(base, mode, options.device)
            _sync(options.device)
            quantized = time.perf_counter() - started
            row = measure_mode(model, mode, options, context)
            row["quantize_s"] = round(quantized, 1)
            say(f"{mode}: measured")
        except Exception as exc:  # one mode failing is a row that says why; the others still run
            import sys
            import traceback

            traceback.print_exc(limit=-3, file=sys.stderr)
            row = {"mode": mode, "error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"}
        report["modes"].append(row)
        model = None
        gc.collect()
        device = device_figures(options, device)
    base = context = None
    gc.collect()
    report["device"] = device.as_dict()
    say(f"device: {device.bandwidth / 1e9:.1f} GB/s, {device.peak_flops / 1e12:.2f} TFLOP/s ({device.source})")
    for row in report["modes"]:
        if "timed" in row:
            finish(row, config, options, device)
    report["machine"]["load_average_after"] = machine()["load_average"]
    report["summary"] = summary(report)
    return report


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """The worst expert-ops count and the worst batch-1 block-pass ratio over the modes measured."""
    counted = [row["ops"]["experts_ops_per_layer"] for row in report["modes"] if row.get("ops")]
    ratios = {row["mode"]: next(p["ratio"] for p in row["passes"] if p["pass"] == "block pass batch 1")
              for row in report["modes"] if row.get("passes")}
    return {"experts_ops_per_layer": max(counted) if counted else None,
            "block_pass_ratio": max(ratios.values()) if ratios else None, "block_pass_ratio_by_mode": ratios,
            "targets": [{"target": f"experts ops per layer ≤ {TARGET_EXPERT_OPS} ({row['mode']})",
                         "value": row["ops"]["experts_ops_per_layer"],
                         "met": row["ops"]["experts_ops_per_layer"] <= TARGET_EXPERT_OPS}
                        for row in report["modes"] if row.get("ops")]
                       + [{"target": f"block pass measured/floor ≤ {TARGET_RATIO[m]} ({m})", "value": r,
                           "met": r <= TARGET_RATIO[m]} for m, r in ratios.items() if m in TARGET_RATIO]}


def render(report: dict[str, Any]) -> list[str]:
    """The report as lines; the last two are ``experts ops per layer: N`` and ``block pass measured/floor: X``
    (the worst over the modes measured)."""
    o, d, m, z = report["options"], report["device"], report["machine"], report["sizes"]
    width = "Clover-width" if o.get("width", "clover") == "clover" else "TINY-width (dry run)"
    lines = [f"roofline: {width} Qwen3.5-MoE, {o['layers']} layers ({', '.join(report['layer_types'])}), "
             f"hidden {z['hidden_size']}, {z['num_experts']} experts of {z['moe_intermediate_size']} top-{z['num_experts_per_tok']}, "
             f"vocab {z['vocab_size']:,}, random weights, {o['device']} {o['dtype']}",
             f"machine: {m['cpu']}, {m['cores']} cores, load average {m['load_average']} → "
             f"{m.get('load_average_after')}; floor device {d['bandwidth_gb_s']} GB/s, {d['peak_tflop_s']} TFLOP/s "
             f"({d['source']})",
             f"tokens/s: prefill positions/s; block passes rows / ({o['forwards_per_token']} forwards per token × s)",
             "floor: the experts the routers picked (uniform: E·(1 − (1 − k/E)^n) a layer); ms: fastest of the repeats",
             f"{'mode':5} {'pass':22} {'ms':>9} {'floor ms':>9} {'×floor':>7} {'×unif.':>7} {'bound':>7} {'GB':>7} "
             f"{'GFLOP':>7} {'experts':>9} {'tok/s':>8} {'floor tok/s':>11}"]
    for row in report["modes"]:
        if "error" in row:
            lines.append(f"{row['mode']:5} failed: {row['error']}")
            continue
        for p in row["passes"]:
            experts = f"{p['experts_hit_routed']}/{p['experts_hit']:.0f}" if "experts_hit_routed" in p else \
                f"{p['experts_hit']:.0f}"
            lines.append(f"{row['mode']:5} {p['pass']:22} {p['measured_ms']:9.1f} "
                         f"{p.get('floor_ms_routed', p['floor_ms']):9.2f} {p['ratio']:7.2f} {p['ratio_uniform']:7.2f} "
                         f"{p['bound']:>7} {p.get('gb_routed', p['gb']):7.3f} {p['gflop']:7.1f} {experts:>9} "
                         f"{p['tokens_per_s']:8.1f} {p['floor_tokens_per_s']:11.1f}")
    for row in report["modes"]:
        if row.get("ops"):
            ops = row["ops"]
            parts = ", ".join(f"{part} {n}" for part, n in ops["ops"].items())
            lines.append(f"{row['mode']:5} ops in a batch-1 block pass: {ops['total']} ({parts}); "
                         f"experts {ops['experts_ops_per_layer']} a layer; syncs {ops['syncs'] or 0}"
                         + (f"; experts kernel: {row['experts_kernel']}" if row.get("experts_kernel") else ""))
        kernels = [k for k in (row.get("gdn_kernel"), row.get("linears_kernel") and
                               f"int8 linears: {row['linears_kernel']}") if k]
        if kernels:
            lines.append(f"{row['mode']:5} kernels: {'; '.join(kernels)}")
    for target in report["summary"]["targets"]:
        lines.append(f"target {target['target']}: {target['value']} — {'met' if target['met'] else 'NOT met'}")
    s = report["summary"]
    lines.append(f"experts ops per layer: {_number(s['experts_ops_per_layer'])}")
    lines.append(f"block pass measured/floor: {_number(s['block_pass_ratio'])}")
    return lines


def _number(value: Any) -> str:
    if value is None:
        return "not measured"
    return str(int(value)) if float(value).is_integer() else str(value)


__all__ = ["RooflineOptions", "build", "measure_mode", "render", "run"]

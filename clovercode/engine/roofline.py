"""The roofline of a forward pass: the bytes it must move and the arithmetic it must do, from a model's
config and its weights' bytes per parameter, and the floor time on a device = max(bytes / bandwidth,
FLOPs / peak). A pass that takes N× its floor wastes (N − 1)/N of the device; the bench
(``clovercode bench engine --roofline``) and the GPU check print that ratio.

What a pass must move (docs/engine.md, "Roofline"): every layer's mixer projections (attention or Gated
DeltaNet), norms, router, shared expert; the routed experts its tokens hit (each token picks top-k
distinct experts of E, so under uniform routing E·(1 − (1 − k/E)^n) distinct experts for n tokens, or
the experts actually hit when the router's picks are given); keys and values of the cached context
(full-attention layers) and the recurrent and conv state (Gated DeltaNet layers); the LM head once if
any logits are computed; the embedding rows of its tokens; and the logits it writes. Activations that
stay in caches are not counted (a few MB at these sizes). Pure arithmetic, no torch at import: the
probe that measures a CPU imports it when called.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

GROUPS = ("experts", "linear", "lm_head", "embeddings", "other")  # as engine/weightplan.py counts them
BLOCK = 32  # Clover's block: a block pass runs this many positions per row
# clover-tiny at threshold 0.9 decodes 1 / 0.172 ≈ 5.8 tokens per forward (issue 44): a pass's tokens/s
# are rows / (forwards per token × pass seconds)
FORWARDS_PER_TOKEN = 0.172


@dataclass(frozen=True)
class Dims:
    """The sizes a pass's cost depends on (a Qwen3.5-MoE / Qwen3-Next hybrid, or a dense decoder)."""

    hidden: int
    layer_types: tuple[str, ...]
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    experts: int = 0
    top_k: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0
    intermediate: int = 0  # a dense model's MLP
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    conv_kernel: int = 4
    tied: bool = False
    gated_query: bool = False  # Qwen3-Next / 3.5: the query projection also makes the output gate

    @classmethod
    def from_config(cls, config: Any) -> "Dims":
        """From config.json's fields (a mapping, or a transformers config object); ``text_config`` inside wins."""
        c = config if isinstance(config, Mapping) else config.to_dict()
        c = dict(c.get("text_config") or c)
        layers = int(c["num_hidden_layers"])
        heads = int(c["num_attention_heads"])
        hidden = int(c["hidden_size"])
        kinds = tuple(list(c.get("layer_types") or [])[:layers]) or ("full_attention",) * layers
        return cls(hidden=hidden, layer_types=kinds, heads=heads,
                   kv_heads=int(c.get("num_key_value_heads") or heads), head_dim=int(c.get("head_dim") or hidden // heads),
                   vocab=int(c["vocab_size"]), experts=int(c.get("num_experts") or 0),
                   top_k=int(c.get("num_experts_per_tok") or 0), moe_intermediate=int(c.get("moe_intermediate_size") or 0),
                   shared_intermediate=int(c.get("shared_expert_intermediate_size") or 0),
                   intermediate=int(c.get("intermediate_size") or 0),
                   linear_key_heads=int(c.get("linear_num_key_heads") or 0),
                   linear_value_heads=int(c.get("linear_num_value_heads") or 0),
                   linear_key_dim=int(c.get("linear_key_head_dim") or 0),
                   linear_value_dim=int(c.get("linear_value_head_dim") or 0),
                   conv_kernel=int(c.get("linear_conv_kernel_dim") or 4),
                   tied=bool(c.get("tie_word_embeddings", False)), gated_query="linear_num_key_heads" in c)

    @property
    def layers(self) -> int:
        return len(self.layer_types)

    @property
    def full_layers(self) -> int:
        return sum(1 for k in self.layer_types if k != "linear_attention")

    @property
    def linear_layers(self) -> int:
        return self.layers - self.full_layers

    # parameters, per layer of each kind
    @property
    def attention_params(self) -> int:
        q = self.heads * self.head_dim * (2 if self.gated_query else 1)
        return self.hidden * (q + 2 * self.kv_heads * self.head_dim) + self.heads * self.head_dim * self.hidden

    @property
    def gdn_params(self) -> int:
        key, value = self.linear_key_heads * self.linear_key_dim, self.linear_value_heads * self.linear_value_dim
        # in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj
        return self.hidden * (2 * key + 2 * value + 2 * self.linear_value_heads) + value * self.hidden

    @property
    def gdn_small_params(self) -> int:
        """Kept as loaded: the depthwise conv, dt_bias, A_log and the gated norm."""
        key, value = self.linear_key_heads * self.linear_key_dim, self.linear_value_heads * self.linear_value_dim
        return (2 * key + value) * self.conv_kernel + 2 * self.linear_value_heads + self.linear_value_dim

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden * self.moe_intermediate  # gate, up, down of one routed expert

    @property
    def shared_params(self) -> int:
        return 3 * self.hidden * (self.shared_intermediate if self.experts else self.intermediate)

    def gdn_state_bytes(self, dtype_bytes: int) -> int:
        """One row's state in one Gated DeltaNet layer: the float32 recurrent state and the conv window."""
        key = self.linear_key_heads * self.linear_key_dim
        conv = (2 * key + self.linear_value_heads * self.linear_value_dim) * self.conv_kernel * dtype_bytes
        return self.linear_value_heads * self.linear_key_dim * self.linear_value_dim * 4 + conv


@dataclass(frozen=True)
class Pass:
    """``rows`` sequences, each running ``positions`` new positions after ``context`` cached ones, with
    logits computed for ``logits`` of them (a prefill keeps only its last)."""

    name: str
    rows: int
    positions: int
    context: int
    logits: int
    causal: bool = False  # a prefill is causal; a block pass attends within its block both ways

    @property
    def tokens(self) -> int:
        return self.rows * self.positions


def prefill(positions: int, context: int = 0) -> Pass:
    return Pass(f"prefill chunk {positions}", 1, positions, context, 1, causal=True)


def block(rows: int, context: int, size: int = BLOCK) -> Pass:
    return Pass(f"block pass batch {rows}", rows, size, context, size)


def expected_experts_hit(experts: int, top_k: int, tokens: int) -> float:
    """Distinct experts that ``tokens`` tokens hit when each picks ``top_k`` distinct ones of
    ``experts`` uniformly: an expert is missed by one token with probability 1 − k/E."""
    if not experts or not tokens:
        return 0.0
    return experts * (1 - (1 - top_k / experts) ** tokens)


def bytes_per_parameter(mode: str, dtype_bytes: int = 2) -> dict[str, float]:
    """Each group's bytes per parameter in ``mode`` as planned (engine/weightplan.py); a loaded model's
    real figures come from :func:`measured_bytes_per_parameter`."""
    from clovercode.engine.weightplan import bytes_per_parameter as planned

    return {g: planned(g, mode, dtype_bytes) for g in GROUPS}


@dataclass
class Cost:
    """A pass's bytes and FLOPs by part, and its floor on a device."""

    pass_: Pass
    bytes: dict[str, float] = field(default_factory=dict)
    flops: dict[str, float] = field(default_factory=dict)
    experts_hit: float = 0.0  # distinct routed experts read, summed over the layers

    @property
    def total_bytes(self) -> float:
        return sum(self.bytes.values())

    @property
    def total_flops(self) -> float:
        return sum(self.flops.values())

    def floor_s(self, device: "Device") -> float:
        return max(self.total_bytes / device.bandwidth, self.total_flops / device.peak_flops)

    def bound(self, device: "Device") -> str:
        return "memory" if self.total_bytes / device.bandwidth >= self.total_flops / device.peak_flops else "compute"

    def as_dict(self, device: "Device | None" = None) -> dict[str, Any]:
        out: dict[str, Any] = {"pass": self.pass_.name, "rows": self.pass_.rows, "positions": self.pass_.positions,
                               "context": self.pass_.context, "gb": round(self.total_bytes / 1e9, 4),
                               "gflop": round(self.total_flops / 1e9, 3), "experts_hit": round(self.experts_hit, 2),
                               "bytes_by_part_gb": {k: round(v / 1e9, 4) for k, v in self.bytes.items()}}
        if device is not None:
            out.update(floor_ms=round(1000 * self.floor_s(device), 3), bound=self.bound(device))
        return out


def pass_cost(dims: Dims, p: Pass, bpp: Mapping[str, float], dtype_bytes: int = 2,
              experts_hit: Sequence[int] | None = None) -> Cost:
    """Bytes and FLOPs of pass ``p``; ``bpp`` is bytes per parameter by group (:data:`GROUPS`);
    ``experts_hit``, one count per MoE layer, replaces the uniform-routing expectation."""
    n, h = p.tokens, dims.hidden
    cost = Cost(p)
    b, f = cost.bytes, cost.flops

    def add(table: dict[str, float], part: str, value: float) -> None:
        table[part] = table.get(part, 0.0) + value

    attended = p.context + ((p.positions + 1) / 2 if p.causal else p.positions)  # keys each position sees
    for index, kind in enumerate(dims.layer_types):
        add(b, "norms", 2 * h * bpp["other"])
        if kind == "linear_attention":
            add(b, "gdn projections", dims.gdn_params * bpp["linear"] + dims.gdn_small_params * bpp["other"])
            add(b, "gdn state", p.rows * dims.gdn_state_bytes(dtype_bytes))
            add(f, "gdn", 2 * n * dims.gdn_params
                + 6 * n * dims.linear_value_heads * dims.linear_key_dim * dims.linear_value_dim)
        else:
            add(b, "attention projections", dims.attention_params * bpp["linear"] + 2 * dims.head_dim * bpp["other"])
            add(b, "kv cache", p.rows * p.context * 2 * dims.kv_heads * dims.head_dim * dtype_bytes)
            add(f, "attention", 2 * n * dims.attention_params + 4 * n * dims.heads * dims.head_dim * attended)
        if dims.experts:
            hit = experts_hit[index] if experts_hit is not None else expected_experts_hit(dims.experts, dims.top_k, n)
            cost.experts_hit += hit
            add(b, "routed experts", hit * dims.expert_params * bpp["experts"])
            add(b, "router", (dims.experts * h + h) * bpp["other"])  # and the shared expert's 1-wide gate
            add(f, "routed experts", 2 * n * dims.top_k * dims.expert_params)
            add(f, "router", 2 * n * (dims.experts + 1) * h)
        add(b, "shared expert" if dims.experts else "mlp", dims.shared_params * bpp["linear"])
        add(f, "shared expert" if dims.experts else "mlp", 2 * n * dims.shared_params)
    add(b, "norms", h * bpp["other"])
    b["embeddings"] = n * h * bpp["embeddings"]
    computed = p.rows * p.logits
    if computed:
        head = bpp["embeddings"] if dims.tied else bpp["lm_head"]
        b["lm head"] = dims.vocab * h * head
        b["logits (written)"] = computed * dims.vocab * dtype_bytes
        f["lm head"] = 2 * computed * dims.vocab * h
    return cost


# ---- devices ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Device:
    name: str
    bandwidth: float  # bytes/s
    peak_flops: float  # dense bf16 (the dtype weight-only quantized passes compute in), FLOP/s
    source: str  # "table: …" or "measured: …"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bandwidth_gb_s": round(self.bandwidth / 1e9, 1),
                "peak_tflop_s": round(self.peak_flops / 1e12, 2), "source": self.source}


# Vendor datasheets, dense (no sparsity) bf16 tensor-core rate; matched against torch's device name,
# the longest key that the name contains. H200 NVL (PCIe) shares the H200's memory at a lower clock.
KNOWN_GPUS: dict[str, tuple[float, float]] = {
    "GB300": (8.0e12, 2.5e15), "B300": (8.0e12, 2.25e15), "GB200": (8.0e12, 2.5e15), "B200": (8.0e12, 2.25e15),
    "H200 NVL": (4.8e12, 835e12), "H200": (4.8e12, 989e12), "GH200": (4.0e12, 989e12),
    "H100 PCIe": (2.0e12, 756e12), "H100 NVL": (3.9e12, 835e12), "H100": (3.35e12, 989e12),
    "A100-SXM4-80GB": (2.039e12, 312e12), "A100 80GB PCIe": (1.935e12, 312e12), "A100": (1.555e12, 312e12),
    "L40S": (0.864e12, 362e12), "L4": (0.3e12, 121e12), "A10G": (0.6e12, 70e12),
    "RTX PRO 6000": (1.792e12, 250e12), "RTX 6000 Ada": (0.96e12, 182e12), "A6000": (0.768e12, 155e12),
    "RTX 5090": (1.792e12, 209e12), "RTX 4090": (1.008e12, 165e12), "RTX 3090": (0.936e12, 71e12),
}


def known_device(name: str) -> Device | None:
    """The table's figures for a GPU whose name (``torch.cuda.get_device_name``) contains a known key."""
    matches = [k for k in KNOWN_GPUS if k.lower() in name.lower()]
    if not matches:
        return None
    key = max(matches, key=len)
    bandwidth, peak = KNOWN_GPUS[key]
    return Device(name, bandwidth, peak, f"table: {key} datasheet")


def probe(device: str = "cpu", dtype: Any = None, copy_mib: int = 512, size: int = 2048, repeats: int = 3) -> Device:
    """Measure ``device``: a copy of ``copy_mib`` MiB (read + write counted) and a ``size``² matmul in
    ``dtype``, each the fastest of ``repeats`` (the least disturbed run on a shared machine)."""
    import torch

    dtype = dtype or torch.bfloat16
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)

    def fastest(run: Any) -> float:
        run()  # warm: first touch of the pages, kernel selection
        best = math.inf
        for _ in range(repeats):
            sync()
            started = time.perf_counter()
            run()
            sync()
            best = min(best, time.perf_counter() - started)
        return best

    source = torch.empty(copy_mib * 2 ** 20, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    bandwidth = 2 * source.numel() / fastest(lambda: target.copy_(source))
    del source, target
    a = torch.randn(size, size, device=device).to(dtype)
    c = torch.randn(size, size, device=device).to(dtype)
    peak = 2 * size ** 3 / fastest(lambda: a @ c)
    dtype_name = str(dtype).removeprefix("torch.")
    return Device(str(device), bandwidth, peak,
                  f"measured: {copy_mib} MiB copy, {size}² {dtype_name} matmul, fastest of {repeats}")


def measured_bytes_per_parameter(model: Any) -> dict[str, float]:
    """A loaded model's real bytes per parameter by group (quantized tensors by their inner tensors,
    scales included: engine/quantize.py ``bytes_by_group``); the output projection apart from the other
    linear layers, since quantized modes treat it apart."""
    from clovercode.engine.memory import tensor_bytes
    from clovercode.engine.quantize import bytes_by_group

    groups = bytes_by_group(model)
    out = {g: v["bytes"] / v["parameters"] for g, v in groups.items() if v["parameters"]}
    head = model.get_output_embeddings()
    embed = model.get_input_embeddings()
    if head is not None and (embed is None or head.weight is not embed.weight):
        head_bytes, head_params = tensor_bytes(head.weight), head.weight.numel()
        out["lm_head"] = head_bytes / head_params
        rest = groups.get("linear", {"bytes": 0, "parameters": 0})
        if rest["parameters"] > head_params:
            out["linear"] = (rest["bytes"] - head_bytes) / (rest["parameters"] - head_params)
    for group in GROUPS:  # a group the model lacks costs nothing; give it the embeddings' dtype
        out.setdefault(group, out.get("embeddings", 2.0))
    return out


def total_floor_ms(costs: Iterable[Cost], device: Device) -> float:
    return 1000 * sum(c.floor_s(device) for c in costs)

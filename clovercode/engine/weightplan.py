"""How many bytes a model's weights take in each quantization mode: parameters counted by module group
(fused MoE experts, linear layers, the output projection, embeddings, the rest), from a config or from a
checkpoint's safetensors headers, times what each mode stores per parameter. Pure arithmetic, no torch:
the memory plan (memplan.py) and ``gpu_check.sh --plan-only`` use it without weights.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import clovercode.ground.boundedjson as boundedjson

MODES = ("none", "int8", "int4", "fp8", "auto")
QUANTIZED_MODES = ("int8", "int4", "fp8")
# Preferred first: what ``auto`` tries, keeping the most precision that fits.
AUTO_ORDER = ("none", "fp8", "int8", "int4")
GROUP = 128  # int4 group size along a matrix's input dimension (engine/qexperts.py, torchao)
GROUPS = ("experts", "linear", "lm_head", "embeddings", "other")


@dataclass(frozen=True)
class ParameterCounts:
    experts: int = 0  # fused 3-D expert weights
    linear: int = 0  # every other matrix of an nn.Linear (attention, Gated DeltaNet, shared expert, MLP)
    lm_head: int = 0  # 0 when tied to the embeddings
    embeddings: int = 0
    other: int = 0  # norms, convolutions, routers, vision tower: kept as loaded

    @property
    def total(self) -> int:
        return self.experts + self.linear + self.lm_head + self.embeddings + self.other


def bytes_per_parameter(group: str, mode: str, dtype_bytes: int) -> float:
    """What one parameter of ``group`` takes in ``mode`` (scales included, at the usual shapes)."""
    if mode in ("none", "auto") or group in ("lm_head", "embeddings", "other"):
        # engine/quantize.py keeps the output projection in the model's dtype in every mode: no
        # per-forward dequantized copy of it, so none to plan for
        return float(dtype_bytes)
    if mode == "int4":  # two a byte, and a scale (and torchao's zero point) per group
        return 0.5 + 2 * dtype_bytes / GROUP
    return 1.0 + 8 / 2048  # int8 / fp8: a byte, and a per-row scale over rows of ~2048


def weights_bytes(counts: ParameterCounts, mode: str, dtype_bytes: int = 2) -> int:
    return int(sum(getattr(counts, g) * bytes_per_parameter(g, mode, dtype_bytes) for g in GROUPS))


def counts_from_config(config: Mapping[str, Any]) -> ParameterCounts:
    """Parameters by group of a decoder from its config.json fields (a ``text_config`` inside is used);
    the config's ``parameters`` figure, when larger, puts the difference (a vision tower) in ``other``."""
    c = dict(config.get("text_config") or config)
    hidden, layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    heads, kv = int(c["num_attention_heads"]), int(c.get("num_key_value_heads") or c["num_attention_heads"])
    head_dim = int(c.get("head_dim") or hidden // heads)
    kinds = list(c.get("layer_types") or [])[:layers] or ["full_attention"] * layers
    gated = "linear_num_key_heads" in c  # Qwen3-Next / 3.5: the query projection also makes the output gate
    attention = hidden * head_dim * ((2 if gated else 1) * heads + 2 * kv) + heads * head_dim * hidden
    mixers = other = 0
    for kind in kinds:
        if kind == "linear_attention":
            key_dim = int(c["linear_num_key_heads"]) * int(c["linear_key_head_dim"])
            value_heads = int(c["linear_num_value_heads"])
            value_dim = value_heads * int(c["linear_value_head_dim"])
            mixers += hidden * (2 * key_dim + 2 * value_dim + 2 * value_heads) + value_dim * hidden
            other += (2 * key_dim + value_dim) * int(c.get("linear_conv_kernel_dim", 4)) + 2 * value_heads
        else:
            mixers += attention
        other += 2 * hidden  # the layer's two norms
    experts = int(c.get("num_experts") or 0)
    if experts:
        moe = int(c["moe_intermediate_size"])
        shared = int(c.get("shared_expert_intermediate_size") or 0)
        expert_params = layers * experts * 3 * hidden * moe
        dense = layers * 3 * hidden * shared
        other += layers * (experts * hidden + hidden)  # router, shared-expert gate
    else:
        expert_params, dense = 0, layers * 3 * hidden * int(c["intermediate_size"])
    vocab = int(c["vocab_size"])
    tied = bool(c.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    counts = ParameterCounts(experts=expert_params, linear=mixers + dense, lm_head=0 if tied else vocab * hidden,
                             embeddings=vocab * hidden, other=other + hidden)
    stated = int(config.get("parameters") or 0)
    if stated > counts.total:
        counts = ParameterCounts(counts.experts, counts.linear, counts.lm_head, counts.embeddings,
                                 counts.other + stated - counts.total)
    return counts


# ---- safetensors headers ---------------------------------------------------------------------------------

SAFETENSORS_ITEMSIZE = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                        "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "U16": 2, "U32": 4, "U64": 8}
HEADER_LIMIT = 100 * 2 ** 20  # safetensors' own cap on a header: a larger one is not a safetensors file


def read_header(path: Path) -> dict[str, Any] | None:
    """A safetensors file's header (no weights read); None when the file is not one."""
    try:
        with path.open("rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            if size > min(HEADER_LIMIT, os.fstat(handle.fileno()).st_size - 8):
                return None
            header = boundedjson.loads(handle.read(size))  # a TooDeep is a ValueError: not one
    except (OSError, ValueError, struct.error):
        return None
    return header if isinstance(header, dict) else None


@dataclass(frozen=True)
class CheckpointSize:
    """What a checkpoint's safetensors headers say: parameters by group and the bytes stored."""

    counts: ParameterCounts
    stored_bytes: int


def group_of_key(key: str, shape: list[int]) -> str:
    """The group of a parameter named ``key`` (a checkpoint's or a loaded model's) of this shape."""
    if ".experts." in key and len(shape) == 3 or ".experts." in key and ".shared_expert" not in key:
        return "experts"
    if "embed_tokens" in key or key.endswith("wte.weight"):
        return "embeddings"
    if key.startswith("lm_head") or key.endswith(".lm_head.weight"):
        return "lm_head"
    if key.endswith(".weight") and len(shape) == 2 and ("proj" in key or ".mlp." in key) and min(shape) > 1:
        return "linear"
    return "other"


def checkpoint_size(folder: Path) -> CheckpointSize | None:
    """Parameters by group and stored bytes of ``folder``'s ``*.safetensors`` (None: none readable)."""
    totals = dict.fromkeys(GROUPS, 0)
    stored, seen = 0, False
    for path in sorted(folder.glob("*.safetensors")):
        header = read_header(path)
        if header is None:
            return None
        for key, entry in header.items():
            if key == "__metadata__" or not isinstance(entry, dict):
                continue
            shape = [int(x) for x in entry.get("shape", []) if isinstance(x, int)]
            numel = math.prod(shape) if shape else 1
            stored += numel * SAFETENSORS_ITEMSIZE.get(str(entry.get("dtype")), 4)
            totals[group_of_key(key, shape)] += numel
            seen = True
    return CheckpointSize(ParameterCounts(**totals), stored) if seen else None

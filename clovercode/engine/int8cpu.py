"""int8 MoE experts on the CPU without a bf16 copy of any weight: a grouped weight-only int8 GEMM made of
torch's own CPU kernel ``torch._weight_int8pack_mm`` (AVX-512: int8 weights widened in registers,
a scale per output row applied to the result), one call per hit expert over that expert's rows.

Why not the dequantizing path (engine/groupedexperts.py ``dequant_grouped``) on the CPU: it wrote the
layer's hit experts out as bf16 (2 bytes a weight written, read again by the grouped GEMM: 5 bytes of
memory traffic for every int8 byte the floor counts) and torch's CPU grouped GEMM runs 1-2 rows an
expert far below streaming speed; a block pass was ~20× its floor (docs/engine.md, "Roofline").

It is registered as one operator (``clovercode::int8_grouped_mm``), the int8 counterpart of
``torch.nn.functional.grouped_mm`` (whose CPU implementation is likewise a loop of per-group matmuls
inside one operator): a layer dispatches the same number of operators whatever the experts it hits.
Inside, each hit expert costs two host-side calls (a few microseconds each on the CPU, no launches);
it is never chosen off the CPU (engine/expertpath.py), where each would be a kernel launch.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from clovercode.engine import groupedexperts

DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # what the kernel takes for activations and scales


def takes(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor) -> bool:
    """Whether the kernel runs these: CPU, int8 weights [E, out, in], a scale per row in ``x``'s dtype."""
    return (x.device.type == "cpu" and hasattr(torch, "_weight_int8pack_mm") and qdata.dtype == torch.int8
            and qdata.dim() == 3 and x.dtype in DTYPES and scale.dtype == x.dtype
            and scale.shape[:2] == qdata.shape[:2] and scale[0].numel() == qdata.shape[1])


def _grouped(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor, hit: torch.Tensor,
             offsets: torch.Tensor) -> torch.Tensor:
    out = x.new_empty(x.shape[0], qdata.shape[1])
    start = 0
    # the CPU reads these lists from its own memory: no device to wait for
    for expert, end in zip(hit.tolist(), offsets.tolist()):
        if end > start:
            out[start:end] = torch._weight_int8pack_mm(x[start:end], qdata[expert], scale[expert].view(-1))
        start = end
    return out


@functools.cache
def _operator() -> object:
    """Registered on first use (no import-time side effects); a fake kernel gives shapes to tracers."""
    op = torch.library.custom_op("clovercode::int8_grouped_mm", mutates_args=(), device_types="cpu")(_grouped)

    @op.register_fake
    def _(x, qdata, scale, hit, offsets):  # type: ignore[no-untyped-def]
        return x.new_empty(x.shape[0], qdata.shape[1])

    return op


def experts(module: Any, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
    """The experts' output [tokens, hidden] of an int8 ``QuantizedExperts``: the routed pairs sorted by
    expert (the exact hit set), the two projections as int8 grouped GEMMs, one ``index_add_`` back."""
    route = groupedexperts.Route(top_k_index, top_k_weights, module.num_experts, None)
    buffers = module._buffers
    gate, up = grouped_mm(hidden[route.tokens], buffers["gate_up_proj_qdata"], buffers["gate_up_proj_scale"],
                          route.hit, route.offsets).chunk(2, dim=-1)
    out = grouped_mm(module.act_fn(gate) * up * route.weights, buffers["down_proj_qdata"],
                     buffers["down_proj_scale"], route.hit, route.offsets)
    return torch.zeros_like(hidden).index_add_(0, route.tokens, out)


def grouped_mm(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor, hit: torch.Tensor,
               offsets: torch.Tensor) -> torch.Tensor:
    """Rows ``x`` [S, in] sorted by group, group g (ending at ``offsets[g]``, cumulative) times expert
    ``hit[g]``'s int8 matrix ``qdata[hit[g]]`` [out, in] scaled per row by ``scale[hit[g]]`` → [S, out]."""
    return _operator()(x.contiguous(), qdata, scale, hit, offsets)  # type: ignore[operator]

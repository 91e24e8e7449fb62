"""CPU matmuls with the weights as the GEMM's left operand: the unquantized MoE experts and the LM head.

A block pass multiplies a few rows (1-2 per routed expert, 32 per LM head) by large weight matrices
stored [out, in] row-major. Written the usual way (``x @ W.T``, what ``nn.Linear`` and transformers'
grouped experts do) the weights are the right-hand operand, which oneDNN's AMX/AVX-512 kernels re-pack
into their blocked layout on every call: the weights are read, written and read again. Written as
``(W @ x.T).T`` the weights are the left-hand operand, which those kernels read in place, row by row,
and only the few activation columns are packed. The result is the same products summed in the same
order (bit-identical on the bench's bf16 model); measured on the 2-core Xeon (docs/engine.md,
"Roofline"): a layer's routed experts 15-25 % faster at a block's 1-2 rows an expert (and still faster at
batch 8's ~8), the 248,320-row LM head ~10 % at a batch-1 block's 32 rows — and slower past 32 rows,
where the GEMM turns compute-bound: there the head keeps ``nn.Linear``'s form (:data:`HEAD_ROWS`).

Only the CPU takes these (engine/expertpath.py chooses; CUDA keeps transformers' grouped GEMM and
cuBLAS, whose kernels read either operand in place). Nothing here loops over experts in Python: two
grouped GEMMs a layer, whatever the number of experts a block hits.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

NAME = "weights_first_grouped_mm"  # the experts implementation's name in transformers' registry
# torch's CPU grouped GEMM takes these dtypes, and rows whose stride is a multiple of 16 bytes
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_ALIGN = 16
# Where weights-first is faster: the half-precision GEMMs oneDNN runs on AMX / AVX-512-BF16, which pack
# the right-hand operand. In float32 (MKL's kernels; clover-tiny's CPU dtype) it measured slower — the
# experts of a 64-expert float32 layer in 18 of 30 paired runs, a 2,112-row head at 1-8 rows — so a
# float32 model keeps transformers' and nn.Linear's forms.
FASTER = (torch.bfloat16, torch.float16)
# A head below this many parameters stays nn.Linear: a cache-resident matrix has no streaming to gain,
# and a 2,112 × 256 bf16 head measured slower weights-first; Clover's 248,320 × 2,048 is 7.6× this.
HEAD_MIN_PARAMETERS = 2 ** 26


def experts_fit(module: Any, dtype: torch.dtype) -> bool:
    """Whether ``module`` (transformers' fused experts) can run :func:`experts_forward` in ``dtype``:
    gated, no bias, stored [E, out, in], no expert parallelism or post-expert norm, widths whose rows
    torch's grouped GEMM accepts."""
    plain = (getattr(module, "has_gate", False) and not getattr(module, "has_bias", True)
             and not getattr(module, "is_transposed", True) and not getattr(module, "_is_expert_parallel", True)
             and not getattr(module, "has_post_expert_norm", True))
    if not plain or dtype not in DTYPES or not hasattr(torch.nn.functional, "grouped_mm"):
        return False
    size = torch.tensor([], dtype=dtype).element_size()
    hidden, inner = module.gate_up_proj.shape[-1], module.down_proj.shape[-1]
    return (hidden * size) % _ALIGN == 0 and (inner * size) % _ALIGN == 0


def experts_forward(module: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' grouped experts (``grouped_mm_experts_forward``) with each group's GEMM turned
    around: ``W_e @ x_g.T`` over the (token, expert) pairs sorted by expert; the combine is the same
    (weighted rows back in token order, summed over the top k), so the result is too. A module moved
    since it was chosen runs transformers' grouped experts off the CPU, its batched matmul on the CPU
    where the dtype or widths do not fit (float64: torch's grouped GEMM has none)."""
    from transformers.integrations.moe import batched_mm_experts_forward, grouped_mm_experts_forward

    if hidden_states.device.type != "cpu":
        return grouped_mm_experts_forward(module, hidden_states, top_k_index, top_k_weights)
    if not experts_fit(module, hidden_states.dtype) or module.gate_up_proj.dtype != hidden_states.dtype:
        return batched_mm_experts_forward(module, hidden_states, top_k_index, top_k_weights)
    tokens, top_k = top_k_index.shape
    expert_ids = top_k_index.reshape(-1)
    sorted_ids, order = torch.sort(expert_ids)
    # rows per expert through histc (float on the CPU), as transformers does: no host sync, static shapes
    counts = torch.histc(sorted_ids.float(), bins=module.num_experts, min=0, max=module.num_experts - 1)
    offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
    rows = hidden_states[order // top_k]  # [S, hidden], grouped by expert
    # [2I, S]: each group's columns are W_e [2I, hidden] @ its rows' [hidden, n] (a transposed view)
    gate_up = torch.nn.functional.grouped_mm(module.gate_up_proj, rows.t(), offs=offsets)
    # [S, I] row-major (an elementwise result keeps its input's column-major strides otherwise), so the
    # next GEMM reads it as a transposed view whose rows are I long, aligned whatever S is
    inner = module._apply_gate(gate_up.t()).contiguous()
    out = torch.nn.functional.grouped_mm(module.down_proj, inner.t(), offs=offsets).t()  # [S, hidden]
    weighted = out * top_k_weights.reshape(-1)[order].unsqueeze(-1)
    back = torch.empty_like(order)
    back[order] = torch.arange(order.numel(), device=order.device)
    return weighted[back].view(tokens, top_k, -1).sum(dim=1).to(hidden_states.dtype)


def register() -> None:
    """Make :func:`experts_forward` selectable by name in transformers' experts registry (idempotent)."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    if ALL_EXPERTS_FUNCTIONS.get(NAME) is not experts_forward:
        ALL_EXPERTS_FUNCTIONS.register(NAME, experts_forward)


# Rows up to which the LM head goes weights-first. Paired A/B on the 2-core Xeon (the 248,320-row head,
# bf16, 16 alternations): 32 rows (a batch-1 block) weights-first 7 ms faster in the median, faster in
# 14 of 16; 64 rows 11 ms slower; 256 rows (batch 8) ~20 % slower. With more rows the GEMM turns
# compute-bound and oneDNN's packed right-hand weights pay for their packing.
HEAD_ROWS = 32


# Output rows a tile of the head's transposition moves at a time: [8192, 32] bf16 is 512 KB, in L2 here.
# Transposing [248,320, 32] in one copy read its source 64 bytes apart, each line fetched again per output
# row (11.1 ms on the 2-core Xeon); in tiles of 2,048 / 4,096 / 8,192 / 16,384 rows 3.2 / 3.0 / 2.7 / 2.8 ms.
TRANSPOSE_TILE = 8192


def transposed(columns: torch.Tensor) -> torch.Tensor:
    """``columns`` [N, rows] as a contiguous [rows, N], moved a tile of :data:`TRANSPOSE_TILE` rows at a
    time (the result of a weights-first product is the transpose of what the caller wants)."""
    out = columns.new_empty(columns.shape[1], columns.shape[0])
    for start in range(0, columns.shape[0], TRANSPOSE_TILE):
        out[:, start:start + TRANSPOSE_TILE].copy_(columns[start:start + TRANSPOSE_TILE].t())
    return out


class WeightsFirstLinear(nn.Linear):
    """An ``nn.Linear`` (still one: quantizers, tied weights and ``get_output_embeddings`` see the same
    module) whose CPU forward over at most :data:`HEAD_ROWS` rows in bf16 / fp16 is ``(W @ x.T).T``
    made contiguous (:func:`transposed`); anything else runs ``nn.Linear``'s."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if (input.device.type != "cpu" or type(weight) is not nn.Parameter or weight.dtype not in FASTER
                or input.dtype != weight.dtype or input.dim() < 2 or input.numel() > HEAD_ROWS * input.shape[-1]):
            return super().forward(input)
        flat = input.reshape(-1, input.shape[-1])
        out = transposed(torch.mm(weight, flat.t()))
        if self.bias is not None:
            out += self.bias
        return out.view(*input.shape[:-1], weight.shape[0])


def install_head(model: Any, device: str, min_parameters: int = HEAD_MIN_PARAMETERS) -> bool:
    """On the CPU, the model's output projection as a :class:`WeightsFirstLinear` (True when it is):
    a plain ``nn.Linear`` (not a model's own class) in bf16 / fp16 of at least ``min_parameters``."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if str(device).split(":")[0] != "cpu" or head is None or type(head) not in (nn.Linear, WeightsFirstLinear):
        return False
    if head.weight.dtype not in FASTER or head.weight.numel() < min_parameters:
        return False
    head.__class__ = WeightsFirstLinear
    return True

"""Quantized MoE experts as grouped matmuls: a layer's routed (token, expert) pairs sorted by expert, the
experts they hit dequantized together (only those, one layer at a time), and one grouped GEMM for the
gate/up projection and one for the down projection. The number of tensor operations per layer is a
constant, whatever the number of experts a block hits (engine/qexperts.py keeps the one-expert-at-a-time
loop only as the reference these are tested against).

Two ways to find the hit experts (docs/engine.md, "Quantized weights"):

* exact (``capacity=None``): ``torch.unique`` over the routed ids. Dequantizes exactly the hit experts;
  its output shapes depend on the routing (a host sync on CUDA), so a CUDA graph cannot capture it.
* fixed capacity (``capacity=min(E, tokens × top_k)``): the hit experts first (ascending), padded with
  unhit ones to a size known from the shapes alone; padded experts get empty groups. Every shape is
  static and nothing is read back to the host, so it can be captured, at the price of dequantizing
  ``capacity`` experts instead of the hit ones (at a 32-position block × 8 picks of 256: all 256).
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

import torch
from torch import nn

FP8_MAX = 448.0  # float8 e4m3's largest finite value


@functools.lru_cache(maxsize=16)
def _int4_table(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[256, 2]: a packed byte → its (low, high) nibbles as signed values (stored offset by 8); kept, so a
    pass spends one gather on unpacking, not six elementwise operations."""
    byte = torch.arange(256, device=device)
    return torch.stack(((byte & 0x0F) - 8, (byte >> 4) - 8), dim=-1).to(dtype)


class Route:
    """The routed pairs of one layer's tokens, sorted by expert: which experts to dequantize (``hit``),
    the rows of each in the sorted order (``offsets``, cumulative), and where each row came from."""

    def __init__(self, top_k_index: torch.Tensor, top_k_weights: torch.Tensor, num_experts: int,
                 capacity: int | None):
        top_k = top_k_index.shape[-1]
        ids = top_k_index.reshape(-1)
        if capacity is None:
            self.hit, compact, counts = torch.unique(ids, return_inverse=True, return_counts=True)
        elif capacity >= num_experts:  # every expert, in id order: the routed ids are the groups
            self.hit, compact = torch.arange(num_experts, device=ids.device), ids
            counts = torch.zeros(num_experts, dtype=torch.int32, device=ids.device).index_add_(
                0, ids, torch.ones_like(ids, dtype=torch.int32))
        else:
            present = torch.zeros(num_experts, dtype=torch.int32, device=ids.device).index_fill_(0, ids, 1)
            # stable descending: hit experts first, each kind in ascending id (the reference's order)
            self.hit = torch.sort(present, descending=True, stable=True).indices[:capacity]
            rank = torch.empty(num_experts, dtype=torch.long, device=ids.device)
            rank[self.hit] = torch.arange(capacity, device=ids.device)
            compact = rank[ids]
            counts = torch.zeros(capacity, dtype=torch.int32, device=ids.device).index_add_(
                0, compact, torch.ones_like(compact, dtype=torch.int32))
        # stable: within an expert, tokens in order, so each token sums its experts as the reference does
        order = torch.sort(compact, stable=True).indices
        self.offsets = counts.cumsum(0, dtype=torch.int32)
        self.tokens = order // top_k
        self.weights = top_k_weights.reshape(-1, 1)[order]  # a column: it scales each sorted row


class Workspace:
    """Where the CPU writes a layer's gathered and dequantized experts: buffers per projection, reused by every
    layer and pass (layers run one after another), grown when a pass hits more. The CPU has no caching
    allocator: a fresh buffer of hundreds of MB is fresh pages to fault in and zero on every call, which
    made the batched dequantization slower than the loop's small, cache-resident one. Holds at most one
    layer's hit experts (per thread). On CUDA torch's caching allocator does this already: none there."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[str, torch.dtype], torch.Tensor] = {}

    def take(self, name: str, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        numel = shape.numel()
        held = self.buffers.get((name, dtype))
        # a buffer made under torch.inference_mode cannot be written outside it (a pass under no_grad
        # after one under inference_mode): made again, as an ordinary tensor that both can write
        if held is None or held.numel() < numel or (held.is_inference() and not torch.is_inference_mode_enabled()):
            held = self.buffers[(name, dtype)] = torch.empty(numel, dtype=dtype)
        return held.as_strided(shape, _contiguous_strides(shape))


_LOCAL = threading.local()


def cpu_workspace() -> Workspace:
    """This thread's workspace: two threads running models at once never share one."""
    if not hasattr(_LOCAL, "workspace"):
        _LOCAL.workspace = Workspace()
    return _LOCAL.workspace


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def dequantize(qdata: torch.Tensor, scale: torch.Tensor, hit: torch.Tensor, dtype: torch.dtype,
               name: str = "w") -> torch.Tensor:
    """The hit experts' matrices in ``dtype``, transposed: [n, in, out] (engine/qexperts.py's storage)."""
    cpu = qdata.device.type == "cpu"
    if cpu and qdata.dtype != torch.uint8:  # int8 / float8: gathered into the workspace too. A fresh
        # ``qdata[hit]`` was ~500 MB of new pages a Clover layer, faulted in and zeroed on every call (1.2 s
        # of a 1.6 s int8 block pass, profiled). (int4 keeps its gather: a second buffer for its int32
        # codes would take it past the 40 operations a layer.)
        shape = torch.Size((hit.numel(), *qdata.shape[1:]))
        q = torch.index_select(qdata, 0, hit, out=cpu_workspace().take(f"{name}_q", shape, qdata.dtype))
    else:
        q = qdata[hit]
    if q.dtype == torch.uint8:  # int4: both nibbles of a byte, signed, in one gather from a 256-row table
        s = scale[hit]  # [n, out, groups, 1]
        shape = torch.Size((*q.shape, 2))
        table, index = _int4_table(dtype, q.device), [q.int()]
        if cpu:
            pairs = torch.ops.aten.index.Tensor_out(table, index, out=cpu_workspace().take(name, shape, dtype))
        else:
            pairs = torch.ops.aten.index.Tensor(table, index)
        n, rows, columns = q.shape[0], q.shape[1], q.shape[2] * 2
        # the matrices transposed ([n, in, out], what the grouped GEMM reads), as one view
        return pairs.view(*s.shape[:-1], -1).mul_(s).as_strided((n, columns, rows), (rows * columns, 1, columns))
    # int8 / float8, a scale per output row: convert, then scale in place (a mixed int8 × float multiply
    # is one operation but measured 1.5-2× slower on the CPU than the conversion and an in-place scale)
    out = cpu_workspace().take(name, q.shape, dtype) if cpu else None
    weight = (q.to(dtype) if out is None else out.copy_(q)).mul_(scale[hit])
    return weight.transpose(-2, -1)


def grouped_linear(x: torch.Tensor, weight_t: torch.Tensor, offsets: torch.Tensor, most_rows: int) -> torch.Tensor:
    """Rows ``x`` [S, in] sorted by group, times each group's ``weight_t`` [n, in, out] → [S, out].
    torch's grouped GEMM where it takes the dtype and device (CPU: float32, bfloat16, float16; CUDA:
    bfloat16 on sm80+, as transformers checks); otherwise (float64, the tests' dtype; older GPUs) each
    group padded to ``most_rows`` (no group is longer: the tokens, each picks an expert once) and one
    batched matmul, static in shape too."""
    if _grouped_mm_takes(x):
        return torch.nn.functional.grouped_mm(x, weight_t, offs=offsets)
    return _padded_bmm(x, weight_t, offsets, most_rows)


def _grouped_mm_takes(x: torch.Tensor) -> bool:
    if not hasattr(torch.nn.functional, "grouped_mm"):
        return False
    if x.device.type == "cpu":
        return x.dtype in (torch.float32, torch.bfloat16, torch.float16)
    if x.device.type == "cuda":
        return x.dtype == torch.bfloat16 and torch.cuda.get_device_capability(x.device) >= (8, 0)
    return False


def _padded_bmm(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor, most_rows: int) -> torch.Tensor:
    offsets = offsets.long()
    starts = torch.cat((offsets.new_zeros(1), offsets[:-1]))
    rows = torch.arange(x.shape[0], device=x.device)
    group = torch.searchsorted(offsets, rows, right=True).clamp_(max=weight.shape[0] - 1)
    slot = rows - starts[group]
    padded = x.new_zeros(weight.shape[0], max(most_rows, 1), x.shape[-1])
    padded[group, slot] = x
    return torch.bmm(padded, weight)[group, slot]


def dequant_grouped(module: Any, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                    capacity: int | None = None) -> torch.Tensor:
    """The experts' output [tokens, hidden]: the hit experts dequantized together, two grouped GEMMs."""
    route = Route(top_k_index, top_k_weights, module.num_experts, capacity)
    buffers, dtype = module._buffers, hidden.dtype
    gate_up = dequantize(buffers["gate_up_proj_qdata"], buffers["gate_up_proj_scale"], route.hit, dtype, "gate_up")
    gate, up = grouped_linear(hidden[route.tokens], gate_up, route.offsets, hidden.shape[0]).chunk(2, dim=-1)
    del gate_up  # off the CPU its memory goes back before the down projection's is taken
    down = dequantize(buffers["down_proj_qdata"], buffers["down_proj_scale"], route.hit, dtype, "down")
    out = grouped_linear(module.act_fn(gate) * up * route.weights, down, route.offsets, hidden.shape[0])
    return torch.zeros_like(hidden).index_add_(0, route.tokens, out)


def _quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-row float8 e4m3 activations and their float32 scales."""
    scale = x.float().abs().amax(dim=-1).clamp(min=1e-12) / FP8_MAX
    return (x.float() / scale[:, None]).to(torch.float8_e4m3fn), scale


def scaled_grouped(module: Any, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                   scaled_mm: Callable[..., torch.Tensor] | None = None) -> torch.Tensor:
    """float8 experts without dequantizing any: activations quantized per row, torch's grouped scaled
    GEMM (Hopper/Blackwell) over every expert's groups (empty for the unhit). Static shapes, no host
    sync: capturable. The stored [E, out, in] weights transposed are the column-major [E, in, out] the
    kernel wants, and their per-output-row scales are its per-column ``scale_b``."""
    op = scaled_mm or torch._scaled_grouped_mm
    route = Route(top_k_index, top_k_weights, module.num_experts, module.num_experts)
    buffers = module._buffers

    def linear(x: torch.Tensor, name: str) -> torch.Tensor:
        xq, xs = _quantize_rows(x)
        w = buffers[f"{name}_qdata"]
        ws = buffers[f"{name}_scale"].float().squeeze(-1)  # [E, out]
        return op(xq, w.transpose(-2, -1), xs, ws, offs=route.offsets, out_dtype=torch.bfloat16)

    # capacity E: every expert has its group, in ascending id, so the weights need no gather
    gate, up = linear(hidden[route.tokens], "gate_up_proj").to(hidden.dtype).chunk(2, dim=-1)
    out = linear(module.act_fn(gate) * up, "down_proj").to(hidden.dtype) * route.weights
    return torch.zeros_like(hidden).index_add_(0, route.tokens, out)


def reference_scaled_grouped_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                                offs: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """What ``torch._scaled_grouped_mm`` computes (2-D a, 3-D b, row-wise scales), in plain matmuls: the
    stand-in the CPU tests check :func:`scaled_grouped`'s layouts and scales against."""
    out = torch.empty(a.shape[0], b.shape[-1], dtype=out_dtype)
    start = 0
    for group, end in enumerate(offs.tolist()):
        rows = a[start:end].float() @ b[group].float()
        out[start:end] = (rows * scale_a[start:end, None] * scale_b[group][None, :]).to(out_dtype)
        start = end
    return out


def reference_loop(module: nn.Module, hidden: torch.Tensor, top_k_index: torch.Tensor,
                   top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' eager experts over the quantized weights, one hit expert at a time in Python: the
    reference the grouped paths are tested against, never a path a pass runs."""
    out = torch.zeros_like(hidden)
    dtype = hidden.dtype
    with torch.no_grad():
        mask = nn.functional.one_hot(top_k_index, num_classes=module.num_experts + 1).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    for (expert,) in hit.tolist():
        if expert >= module.num_experts:
            continue
        slot, token = torch.where(mask[expert])
        state = hidden[token]
        gate, up = nn.functional.linear(state, module.expert_weight("gate_up_proj", expert, dtype)).chunk(2, dim=-1)
        state = nn.functional.linear(module.act_fn(gate) * up, module.expert_weight("down_proj", expert, dtype))
        out.index_add_(0, token, (state * top_k_weights[token, slot, None]).to(out.dtype))
    return out

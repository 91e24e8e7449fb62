"""int8 MoE experts on the CPU without a bf16 copy of any weight: a grouped weight-only int8 GEMM. In bf16,
where the machine has a C compiler and AVX-512, clovercode's own kernel (engine/int8native.py: one call
over every hit expert, the experts split between the threads, the next weights prefetched); otherwise
torch's own CPU kernel ``torch._weight_int8pack_mm`` (AVX-512: int8 weights widened in registers, a
scale per output row applied to the result), one call per hit expert over that expert's rows.

Why not the dequantizing path (engine/groupedexperts.py ``dequant_grouped``) on the CPU: it wrote the
layer's hit experts out as bf16 (2 bytes a weight written, read again by the grouped GEMM: 5 bytes of
memory traffic for every int8 byte the floor counts) and torch's CPU grouped GEMM runs 1-2 rows an
expert far below streaming speed; a block pass was ~20× its floor (docs/engine.md, "Roofline").

It is registered as one operator (``clovercode::int8_grouped_mm``), the int8 counterpart of
``torch.nn.functional.grouped_mm`` (whose CPU implementation is likewise a loop of per-group matmuls
inside one operator): a layer dispatches the same number of operators whatever the experts it hits.
Inside, each hit expert costs two host-side calls (a few microseconds each on the CPU, no launches);
it is never chosen off the CPU (engine/expertpath.py), where each would be a kernel launch.

The model's other int8 linears (torchao's ``Int8Tensor`` weights, per-row scales) take the same kernel on
the CPU (:func:`attach`): torchao's weight-only linear widens the whole transposed int8 weight to bf16
on every forward before its matmul (a strided copy: ~20-40 ms for an 8192 × 2048 weight on this VM).
Where rows are many, widening the weight once into a reused buffer and one matmul beats the kernel
(``KERNEL_ROWS``); the int8 weights are never kept widened beyond the one matrix being multiplied. On a
CPU with AMX-BF16, a block's 8-32 rows through a large linear take clovercode's AMX kernel instead
(engine/native/amx_linear.c: 32 weight rows widened at a time in L2, multiplied on the matrix unit).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from clovercode.engine import amxlinear, groupedexperts, int8native

DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # what the kernel takes for activations and scales
# A matrix's rows up to which the kernel beats widening the weight once into a reused bf16 buffer and
# one matmul (AMX): the kernel's time grows with the rows (~0.2 ms a row for an 8192 × 2048 weight), the
# widening's does not (1.4 ms + 1.5-3 ms). Measured in bf16 on that weight: 1 row 0.52 vs 2.97 ms, 8 rows
# 1.67 vs 3.29, 16 rows 3.44 vs 3.18, 32 rows 6.64 vs 3.93. An expert gets 1-2 rows of a block at batch 1
# and ~8 at batch 8; a linear gets 32 rows a row of the batch
KERNEL_ROWS = 16
# The widened matmul sums unscaled int8 values (up to 127 × the inputs, over thousands of columns) before
# the row scale: only dtypes with float32's exponent hold that; float16 (max 65,504) stays on the kernel,
# which scales in float32
WIDEN_DTYPES = (torch.bfloat16, torch.float32)
# The AMX linear (engine/native/amx_linear.c: 32 weight rows widened at a time into L2, multiplied on the
# matrix unit) against the two paths above, bf16, in ms on the 2-core Xeon (weights in cache): 8192 x 2048 at
# 32 rows 1.52 vs widened 3.65 and torch's kernel 6.66; at 17 rows 1.32 vs 3.34 / 4.22; at 1 row 1.19 vs
# torch's 0.46 (its cost is the weight's read and widening, whatever the rows: ~5 rows break even); a
# 512 x 2048 weight 0.33 vs 0.19 widened (packing the rows and starting threads cost ~0.15 ms a call)
AMX_MIN_ROWS = 8
AMX_MIN_WEIGHT = 2048 * 2048
# A group's rows up to which the native kernel (engine/int8native.py, bf16 only) multiplies it: it widens
# each weight in registers once per 4 rows and multiplies in float32 FMAs (or 16-bit integer pair sums on
# VNNI), so its arithmetic grows with the rows while AMX's widened matmul stays at the weight's read; above
# this the groups take the paths below
NATIVE_ROWS = 16


def takes(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor) -> bool:
    """Whether the kernel runs these: CPU, int8 weights [E, out, in], a scale per row in ``x``'s dtype."""
    return (x.device.type == "cpu" and hasattr(torch, "_weight_int8pack_mm") and qdata.dtype == torch.int8
            and qdata.dim() == 3 and x.dtype in DTYPES and scale.dtype == x.dtype
            and scale.shape[:2] == qdata.shape[:2] and scale[0].numel() == qdata.shape[1])


def _grouped(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor, hit: torch.Tensor,
             offsets: torch.Tensor, native: bool = True) -> torch.Tensor:
    out = x.new_empty(x.shape[0], qdata.shape[1])
    lib = int8native.library() if native else None
    done = lib is not None and int8native.takes(x, qdata, scale) and int8native.grouped_mm(
        lib, x, qdata, scale, hit, offsets, out, NATIVE_ROWS, torch.get_num_threads())
    start = 0
    # the CPU reads these lists from its own memory: no device to wait for
    for expert, end in zip(hit.tolist(), offsets.tolist()):
        if done and end - start <= NATIVE_ROWS:
            pass  # the native kernel multiplied this group
        elif 0 < end - start <= KERNEL_ROWS or (end > start and x.dtype not in WIDEN_DTYPES):
            out[start:end] = torch._weight_int8pack_mm(x[start:end], qdata[expert], scale[expert].view(-1))
        elif end > start:  # many rows on one expert (a prompt of repeated tokens): widened once, one matmul
            torch.mm(x[start:end], _widened(qdata[expert], x.dtype).t(), out=out[start:end]).mul_(
                scale[expert].view(1, -1))
        start = end
    return out


def linear_kernel(x_dtype: torch.dtype = torch.bfloat16) -> str:
    """What multiplies the other int8 linears at a block's rows, for the bench."""
    if x_dtype == torch.bfloat16 and amxlinear.library() is not None:
        return f"clovercode's AMX kernel at {AMX_MIN_ROWS}-{amxlinear.ROWS} rows (AMX-BF16, built here)"
    return f"torch's _weight_int8pack_mm up to {KERNEL_ROWS} rows, widened once above"


def kernel(x_dtype: torch.dtype = torch.bfloat16) -> str:
    """Which kernel multiplies the experts' int8 weights on this machine, for the load summary and the bench."""
    lib = int8native.library() if x_dtype == torch.bfloat16 else None
    if lib is not None:
        rows = "16-bit rows on VNNI" if lib.clover_int8_vnni() else "float32 rows"
        return f"clovercode's native int8 kernel (AVX-512, {rows}, built here)"
    return "torch's _weight_int8pack_mm, one call per hit expert"


def _widened(qdata: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One int8 matrix in ``dtype``, in this thread's reused buffer (one matrix at a time: the next call
    overwrites it; a fresh buffer would be fresh pages to fault in on every call on the CPU)."""
    return groupedexperts.cpu_workspace().take("int8_widened", qdata.shape, dtype).copy_(qdata)


@functools.cache
def _operator() -> Any:
    """Registered on first use (no import-time side effects), straight at the dispatcher: a CPU kernel
    and a Meta one that gives shapes to tracers. (``torch.library.custom_op`` wraps its kernel so that
    the first call imports torch._dynamo: 1-4 s of a cold start on this CPU.)"""
    library = torch.library.Library("clovercode", "FRAGMENT")
    library.define("int8_grouped_mm(Tensor x, Tensor qdata, Tensor scale, Tensor hit, Tensor offsets) -> Tensor")
    library.impl("int8_grouped_mm", _grouped, "CPU")
    library.impl("int8_grouped_mm", lambda x, qdata, scale, hit, offsets: x.new_empty(x.shape[0], qdata.shape[1]),
                 "Meta")
    _LIBRARIES.append(library)  # the registration lives as long as this object
    return torch.ops.clovercode.int8_grouped_mm


_LIBRARIES: list[Any] = []


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


def linear_takes(x: torch.Tensor, weight: Any) -> bool:
    """Whether the kernel runs ``x`` against ``weight`` (torchao's weight-only ``Int8Tensor``): CPU, 16- or
    32-bit floats, plain per-row int8 (checked again: :func:`attach` did)."""
    return (x.device.type == "cpu" and x.dtype in DTYPES and hasattr(torch, "_weight_int8pack_mm")
            and per_row_int8(weight))


def per_row_int8(weight: Any) -> bool:
    """Symmetric int8 with a scale per output row and nothing applied to the activations."""
    qdata, scale, zero = (getattr(weight, name, None) for name in ("qdata", "scale", "zero_point"))
    return (isinstance(qdata, torch.Tensor) and isinstance(scale, torch.Tensor) and qdata.dtype == torch.int8
            and qdata.dim() == 2 and scale.numel() == qdata.shape[0]
            and list(getattr(weight, "block_size", ())) == [1, qdata.shape[1]]  # one scale a row, no groups
            and getattr(weight, "act_quant_kwargs", None) is None  # weight-only: activations as they are
            and getattr(weight, "act_pre_scale", None) is None
            and (zero is None or (isinstance(zero, torch.Tensor) and zero.numel() == qdata.shape[0])))


def _amx_for(rows: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor) -> Any:
    """The AMX linear (engine/amxlinear.py) where it beats the other two paths: between :data:`AMX_MIN_ROWS`
    and 32 rows of bf16, a weight of at least :data:`AMX_MIN_WEIGHT` values, a CPU with AMX-BF16."""
    if not AMX_MIN_ROWS <= rows.shape[0] <= amxlinear.ROWS or qdata.numel() < AMX_MIN_WEIGHT:
        return None
    lib = amxlinear.library()
    return lib if lib is not None and amxlinear.takes(rows, qdata, scale) else None


def _linear_forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    weight, bias = self.weight, self.bias
    if not linear_takes(x, weight):
        return torch.nn.functional.linear(x, weight, bias)  # torchao's own path (CUDA, other dtypes)
    rows, scale = x.reshape(-1, x.shape[-1]).contiguous(), weight.scale.reshape(-1).to(x.dtype)
    amx = _amx_for(rows, weight.qdata, scale)
    if amx is not None:
        out = amxlinear.linear(amx, rows, weight.qdata, scale, torch.get_num_threads())
    elif rows.shape[0] <= KERNEL_ROWS or x.dtype not in WIDEN_DTYPES:
        out = torch._weight_int8pack_mm(rows, weight.qdata, scale)
    else:  # torchao widens the transposed weight, a strided copy several times slower than this one
        out = torch.mm(rows, _widened(weight.qdata, x.dtype).t()).mul_(scale)
    out = out.reshape(*x.shape[:-1], weight.qdata.shape[0])
    return out if bias is None else out + bias


def attach(module: torch.nn.Module) -> bool:
    """Make a linear whose weight torchao quantized to symmetric per-row int8 run through the kernel
    where :func:`linear_takes` (another device or dtype still goes to torchao). Whether it did."""
    weight = getattr(module, "weight", None)
    zero = getattr(weight, "zero_point", None)
    # torchao's weight-only linear never applies the zero point; symmetric int8 stores zeros: only then
    if not per_row_int8(weight) or (zero is not None and bool(zero.any())):
        return False
    module.forward = _linear_forward.__get__(module)  # type: ignore[method-assign]
    return True

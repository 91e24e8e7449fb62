"""An int8 linear at a block's rows on the CPU's matrix unit (``native/amx_linear.c``, built by
engine/nativebuild.py): int8 weights as stored with a bf16 scale per output row, bf16 rows [1..32, in], the
result bf16 [rows, out]; engine/int8cpu.py chooses it. ``None`` wherever it cannot be had (no compiler, no
AMX-BF16, the tile data refused, ``CLOVERCODE_INT8_KERNEL=torch``): torch's paths run instead.

Why: torch's CPU kernels for these shapes either multiply int8 in float32 FMAs (``_weight_int8pack_mm``: its
time grows with the rows) or need the whole weight widened to bf16 first (docs/engine.md, "Round 3").
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path
from typing import Any

from clovercode.engine import nativebuild

SOURCE = Path(__file__).with_name("native") / "amx_linear.c"
ROWS = 32  # the rows one call takes (two B tiles of 16)


@functools.cache
def library() -> Any:
    """The kernel (ctypes), or None where it cannot be built or run here."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    return nativebuild.load(SOURCE, os.environ, "CLOVERCODE_INT8_KERNEL", {
        "clover_int8_linear_amx": [ptr, ptr, ptr, ptr, i64, i64, i64, ctypes.c_int]}, available="clover_amx_available")


def takes(x: Any, qdata: Any, scale: Any) -> bool:
    """What the kernel multiplies: bf16 rows [1..32, in], int8 [out, in] with out and in multiples of 32, a bf16
    scale per output row, all contiguous."""
    import torch

    return (x.dtype == torch.bfloat16 and scale.dtype == torch.bfloat16 and qdata.dtype == torch.int8
            and x.dim() == 2 and qdata.dim() == 2 and 1 <= x.shape[0] <= ROWS and x.shape[1] == qdata.shape[1]
            and qdata.shape[0] % 32 == 0 and qdata.shape[1] % 32 == 0 and scale.numel() == qdata.shape[0]
            and x.is_contiguous() and qdata.is_contiguous() and scale.is_contiguous())


def linear(lib: Any, x: Any, qdata: Any, scale: Any, threads: int) -> Any:
    """``x @ qdata.T * scale`` [rows, out] in bf16 (:func:`takes` must hold)."""
    import torch

    if not takes(x, qdata, scale):
        raise ValueError("the AMX int8 linear takes bf16 rows [1..32, in], int8 [out, in] (multiples of 32), bf16 scales")
    out = torch.empty(x.shape[0], qdata.shape[0], dtype=torch.bfloat16)
    status = lib.clover_int8_linear_amx(x.data_ptr(), qdata.data_ptr(), scale.data_ptr(), out.data_ptr(),
                                        x.shape[0], qdata.shape[0], qdata.shape[1], threads)
    if status == -3:
        raise MemoryError("the AMX int8 linear could not allocate its workspace")
    if status != 0:
        raise RuntimeError(f"the AMX int8 linear refused the call (status {status})")
    return out

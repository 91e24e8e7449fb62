"""The native int8 grouped GEMM for the CPU (``native/int8_grouped.c``), built on first use by the machine's
C compiler and loaded with ctypes; ``None`` wherever it cannot be had, and then engine/int8cpu.py keeps
torch's own kernel. Optional by design: clovercode installs and runs on a machine without a compiler.

Why a kernel of our own at all: torch ships no grouped int8 GEMM for the CPU, and its per-matrix one
(``_weight_int8pack_mm``) streamed the experts' int8 weights at ~11 GB/s against a ~31 GB/s copy on the
development VM (docs/engine.md, "int8 on the CPU"); the libraries that have one (SGLang's and vLLM's CPU
MoE, Intel Extension for PyTorch) ship inside their servers or pin another torch.

How it is built, cached and trusted (a private cache, a compiler found outside the project) is
engine/nativebuild.py's, shared with the Gated DeltaNet kernel.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clovercode.engine import nativebuild
from clovercode.engine.nativebuild import cache_root, compiler  # noqa: F401  (this module's API since it was built)

SOURCE = Path(__file__).with_name("native") / "int8_grouped.c"


def build(env: Mapping[str, str]) -> Path | None:
    """The library's path, compiled now if this machine has no copy yet (engine/nativebuild.py)."""
    return nativebuild.build(SOURCE, env)


@functools.cache
def library() -> Any:
    """The loaded kernel (ctypes), or None where it cannot be built or this CPU lacks AVX-512. Built at
    most once a process (0.5 s on the development VM; then loaded from the cache)."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    return nativebuild.load(SOURCE, os.environ, "CLOVERCODE_INT8_KERNEL", {  # the bench's and docs' A/B switch
        "clover_int8_grouped_mm": [ptr, ptr, ptr, ptr, ptr, i64, i64, i64, i64, i64, i64, ptr, ctypes.c_int],
        "clover_int8_vnni": []}, available="clover_int8_available")


def takes(x: Any, qdata: Any, scale: Any) -> bool:
    """Shapes and dtypes the kernel multiplies: bf16 rows, int8 [E, out, in] with out % 4 and in % 64,
    a bf16 scale per output row, all contiguous."""
    import torch

    return (x.dtype == torch.bfloat16 and scale.dtype == torch.bfloat16 and qdata.dtype == torch.int8
            and qdata.dim() == 3 and qdata.shape[1] % 4 == 0 and qdata.shape[2] % 64 == 0
            and x.dim() == 2 and x.shape[1] == qdata.shape[2] and x.is_contiguous() and qdata.is_contiguous()
            and scale.is_contiguous() and scale.numel() == qdata.shape[0] * qdata.shape[1])


def grouped_mm(lib: Any, x: Any, qdata: Any, scale: Any, hit: Any, offsets: Any, out: Any, max_rows: int,
               threads: int) -> bool:
    """Every group of 1..``max_rows`` rows into ``out`` (the others' rows left as they are); whether it
    ran. ``hit`` and ``offsets`` are int64 on the CPU (contiguous copies made here if not)."""
    import torch

    hit64, offsets64 = hit.to(torch.int64).contiguous(), offsets.to(torch.int64).contiguous()
    if hit64.shape != offsets64.shape or hit64.dim() != 1:
        raise ValueError("one expert index per group offset")
    if not takes(x, qdata, scale) or out.shape != (x.shape[0], qdata.shape[1]) or out.dtype != torch.bfloat16 \
            or not out.is_contiguous():
        raise ValueError("the native int8 kernel takes bf16 rows [S, in], int8 [E, out, in] and writes bf16 [S, out]")
    status = lib.clover_int8_grouped_mm(x.data_ptr(), qdata.data_ptr(), scale.data_ptr(), hit64.data_ptr(),
                                        offsets64.data_ptr(), hit64.numel(), qdata.shape[0], x.shape[0],
                                        qdata.shape[1], qdata.shape[2], max_rows, out.data_ptr(), threads)
    if status == -4:  # checked in C, where it costs no operation of its own per call
        raise IndexError(f"an expert index outside 0..{qdata.shape[0] - 1} or a group offset beyond {x.shape[0]} rows")
    if status == -3:
        raise MemoryError("the int8 kernel could not allocate its rows' workspace")
    return status == 0


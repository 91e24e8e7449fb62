"""The gated delta rule of hybrid models' Gated DeltaNet layers, on the CPU, in clovercode's native kernel
(``native/gdn_recurrent.c``, built by engine/nativebuild.py): the same recurrence as transformers' PyTorch
fallbacks, token by token in float32, in one call per layer.

transformers calls its two functions by their module-level names (``torch_chunk_gated_delta_rule`` for a
prefill or a block, ``torch_recurrent_gated_delta_rule`` for one token), each already a wrapper that runs
flash-linear-attention's Triton kernel on a GPU and the PyTorch reference elsewhere. :func:`install`
replaces both names in the layer's modelling module with a wrapper that takes CPU inputs to the native
kernel and passes everything else (a GPU, variable-length packing, a machine without a compiler,
``CLOVERCODE_GDN_KERNEL=torch``) to what was there, unchanged.

Why not the chunked fallback on the CPU: it pads a 32-position block to a 64-position chunk and runs ~40
small float32 operations and a triangular solve (~14 ms a layer for a block pass at Clover's widths on a
2-core Xeon, docs/engine.md); the recurrence is two passes over a 64 KB state per head and token. The
result agrees with the fallbacks to float32 rounding (tests/test_engine_gdncpu.py) and, unlike the
chunked form, does not depend on how a sequence is split into calls, nor on the batch around a row.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from pathlib import Path
from typing import Any, Callable

from clovercode.engine import nativebuild

SOURCE = Path(__file__).with_name("native") / "gdn_recurrent.c"
NAMES = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")
# float64 stays on the fallbacks (which compute it in float32 too): the suite's float64 models keep their path
DTYPES = ("torch.float32", "torch.bfloat16", "torch.float16")
SWITCH = "CLOVERCODE_GDN_KERNEL"  # "torch": keep transformers' fallbacks (the A/B switch of the bench)


@functools.cache
def library() -> Any:
    """The loaded kernel (ctypes), or None where it cannot be built; built at most once a process."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    return nativebuild.load(SOURCE, os.environ, SWITCH, {
        "clover_gdn_recurrent": [ptr] * 7 + [i64] * 6 + [ctypes.c_int, ctypes.c_int]}, libraries=("m",))


def takes(query: Any, key: Any, value: Any, g: Any, beta: Any, initial_state: Any, kwargs: dict) -> bool:
    """CPU tensors of :data:`DTYPES` in the shapes both fallbacks take, one sequence per row (no
    ``cu_seqlens`` packing)."""
    import torch

    tensors = [query, key, value, g, beta] + ([initial_state] if initial_state is not None else [])
    if kwargs.get("cu_seqlens") is not None or not all(isinstance(t, torch.Tensor) for t in tensors):
        return False
    if any(t.device.type != "cpu" or str(t.dtype) not in DTYPES for t in tensors):
        return False
    if query.dim() != 4 or key.shape != query.shape or value.dim() != 4 or value.shape[:2] != query.shape[:2]:
        return False
    batch, tokens, key_heads, _ = query.shape
    value_heads, dv = value.shape[2:]
    if value_heads % key_heads or g.shape != (batch, tokens, value_heads) or beta.shape != g.shape:
        return False
    return initial_state is None or initial_state.shape == (batch, value_heads, query.shape[3], dv)


def gated_delta_rule(query: Any, key: Any, value: Any, g: Any, beta: Any, initial_state: Any = None,
                     output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                     lib: Any = None) -> tuple[Any, Any]:
    """The fallbacks' result: the output [B, T, Hv, dv] in ``query``'s dtype and, if asked, the final state
    [B, Hv, dk, dv] in float32. ``initial_state`` is read, never written."""
    import torch

    lib = lib or library()
    batch, tokens, key_heads, dk = query.shape
    value_heads, dv = value.shape[2:]
    # .to() returns a float32 view as it is, strides and all: contiguous() makes it the layout the kernel reads
    q, k, v, gf, bf = (t.to(torch.float32).contiguous() for t in (query, key, value, g, beta))
    if initial_state is None:
        state = torch.zeros(batch, value_heads, dk, dv, dtype=torch.float32)
    else:
        state = initial_state.to(torch.float32, copy=True).contiguous()
    out = torch.empty(batch, tokens, value_heads, dv, dtype=torch.float32)
    status = lib.clover_gdn_recurrent(q.data_ptr(), k.data_ptr(), v.data_ptr(), gf.data_ptr(), bf.data_ptr(),
                                      state.data_ptr(), out.data_ptr(), batch, tokens, key_heads, value_heads,
                                      dk, dv, int(bool(use_qk_l2norm_in_kernel)), torch.get_num_threads())
    if status == -3:
        raise MemoryError("the gated delta rule kernel could not allocate its workspace")
    if status != 0:
        raise ValueError(f"the gated delta rule kernel refused these shapes (status {status})")
    return out.to(query.dtype), (state if output_final_state else None)


def _wrapping(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (one of transformers' two functions) with CPU inputs taken by the kernel."""

    @functools.wraps(original)
    def delta_rule(query: Any, key: Any, value: Any, g: Any = None, beta: Any = None, *args: Any, **kwargs: Any):
        lib = library()
        initial = kwargs.get("initial_state")
        if args or lib is None or not takes(query, key, value, g, beta, initial, kwargs):
            return original(query, key, value, *args, g=g, beta=beta, **kwargs)
        return gated_delta_rule(query, key, value, g, beta, initial, bool(kwargs.get("output_final_state")),
                                bool(kwargs.get("use_qk_l2norm_in_kernel")), lib)

    delta_rule._clovercode_native = original  # type: ignore[attr-defined]  (what it wraps; gdnkernels reads it)
    return delta_rule


def install(model: Any, device: str) -> bool:
    """On the CPU, where the kernel builds: the module of ``model``'s Gated DeltaNet layers calls it for
    CPU inputs (True when it does). Idempotent; every model of that class in this process shares it."""
    if str(device).split(":")[0] != "cpu":
        return False
    layer = next((m for m in model.modules() if type(m).__name__.endswith("GatedDeltaNet")), None)
    module = sys.modules.get(type(layer).__module__) if layer is not None else None
    # transformers' own modelling modules only: a model's own code may mean something else by these names
    if module is None or not module.__name__.startswith("transformers.models.") or not all(callable(getattr(module, name, None)) for name in NAMES) or library() is None:
        return False
    for name in NAMES:
        function = getattr(module, name)
        if getattr(function, "_clovercode_native", None) is None:
            setattr(module, name, _wrapping(function))
    return True

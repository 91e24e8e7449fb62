"""Which kernels a hybrid model's Gated DeltaNet layers run, said in one line of the load summary.

transformers picks them itself, once, when its modelling module is imported
(``integrations/hub_kernels.use_kernel_func_from_hub_with_fallback``): the chunked and recurrent gated
delta rule from flash-linear-attention (``fla.ops.gated_delta_rule``) and the causal convolution from
``causal_conv1d``, each where the package imports, else its PyTorch reference; and at call time only for
inputs on a device the package runs on (CUDA; fla also XPU/NPU), the reference elsewhere. So "picked
automatically on CUDA when installed" holds with nothing for the engine to switch: what is left is
telling the user which one runs (the fallbacks are correct but far slower) and how to get the kernels
(the ``gpu`` extra). This module reads what transformers dispatches to; it changes nothing (on the CPU,
engine/gdncpu.py puts clovercode's own delta rule kernel behind the same names, and this says so).
"""

from __future__ import annotations

import sys
from typing import Any

# transformers' names of the four functions, and the package each is taken from when it imports
FUNCTIONS = {"torch_chunk_gated_delta_rule": "fla", "torch_recurrent_gated_delta_rule": "fla",
             "causal_conv1d_fn": "causal_conv1d", "causal_conv1d_update": "causal_conv1d"}
DEVICES = {"fla": ("cuda", "xpu", "npu", "mlu"), "causal_conv1d": ("cuda",),  # transformers' own table
           "clovercode": ("cpu",)}  # engine/gdncpu.py's kernel
INSTALL = "install the gpu extra: pip install 'clovercode[gpu]'"


def dispatch(function: Any, depth: int = 4) -> str:
    """``fla`` / ``causal_conv1d`` when transformers' wrapper of ``function`` holds that package's kernel,
    ``clovercode`` for engine/gdncpu.py's wrapper, else ``torch``. The wrappers keep the chosen function in
    closures (and, with the ``kernels`` package installed, inside a module's ``forward``): walk them, a few
    levels deep."""
    seen: set[int] = set()
    frontier = [function]
    for _ in range(depth):
        found = []
        for item in frontier:
            if id(item) in seen:
                continue
            seen.add(id(item))
            root = (getattr(item, "__module__", "") or "").split(".")[0]
            if callable(item) and root in ("fla", "causal_conv1d"):
                return root
            if callable(item) and getattr(item, "_clovercode_native", None) is not None:
                return "clovercode"  # engine/gdncpu.py's wrapper: its kernel on the CPU
            forward = getattr(item, "forward", None)
            if forward is not None and not isinstance(item, type):
                found.append(getattr(forward, "__func__", forward))
            for cell in getattr(item, "__closure__", None) or ():
                try:
                    found.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    continue
        frontier = [f for f in found if callable(f)]
    return "torch"


def kernels_in_use(model: Any) -> dict[str, str] | None:
    """What each of the model's Gated DeltaNet functions dispatches to (None: no Gated DeltaNet layer)."""
    layer = next((m for m in model.modules() if type(m).__name__.endswith("GatedDeltaNet")), None)
    if layer is None:
        return None
    module = sys.modules.get(type(layer).__module__)
    return {name: dispatch(getattr(module, name)) for name in FUNCTIONS if hasattr(module, name)}


def summary(device_type: str, in_use: dict[str, str] | None) -> str | None:
    """The load summary's line for ``in_use`` (from :func:`kernels_in_use`) on ``device_type``."""
    if not in_use:
        return None
    rules = [in_use.get(n) for n in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")]
    if device_type == "cpu" and rules == ["clovercode", "clovercode"]:
        return "GDN: clovercode's CPU kernel (the gated delta rule in C, float32); causal conv on PyTorch"
    fast = {name for name, package in in_use.items() if package != "torch" and device_type in DEVICES[package]}
    if fast and fast == set(in_use):
        return "GDN: fla kernels (flash-linear-attention, causal-conv1d)"
    if device_type not in DEVICES["fla"]:
        return (f"GDN: PyTorch fallback (flash-linear-attention's kernels run on CUDA, not {device_type}); "
                "exact, slower")
    if any(in_use.get(n) == "fla" for n in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")):
        return f"GDN: fla kernels, causal conv on the PyTorch fallback (causal-conv1d not installed; {INSTALL})"
    return f"GDN: PyTorch fallback — {INSTALL} (flash-linear-attention, causal-conv1d)"

"""Which weights mode a load uses (``engine.quantization``) and whether it fits: the checkpoint's
safetensors headers give its parameters by group (engine/weightplan.py), each mode its bytes; a
checkpoint published quantized loads as published and counts the bytes it stores. Nothing here loads."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from clovercode.engine import weightplan
from clovercode.engine.sources import read_json_object, weights_bytes
from clovercode.ground.errors import ModelUnavailable

ITEMSIZE = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
MARGIN = 1.05  # loading needs a little more than the weights (buffers, the tensor being converted)
AUTO_CONTEXT = 8192  # ``auto`` wants the weights and one sequence of this many positions to fit the plan


def published_method(folder: Path) -> str | None:
    """The ``quant_method`` of a checkpoint published quantized (config.json's ``quantization_config``)."""
    path = folder / "config.json"
    if not path.is_file():
        return None
    try:
        config = read_json_object(path)
    except ModelUnavailable:
        return None
    for holder in (config, config.get("text_config") if isinstance(config.get("text_config"), dict) else {}):
        found = holder.get("quantization_config")
        if isinstance(found, dict):
            return str(found.get("quant_method") or "unknown")
    return None


def needs(folder: Path, dtype: str) -> dict[str, int]:
    """Bytes of the weights in each mode (only ``none`` where the headers cannot be read)."""
    size = weightplan.checkpoint_size(folder)
    if size is None:
        return {"none": weights_bytes(folder)}
    return {mode: weightplan.weights_bytes(size.counts, mode, ITEMSIZE.get(dtype, 2))
            for mode in weightplan.AUTO_ORDER}


def torchao_installed() -> bool:
    return importlib.util.find_spec("torchao") is not None


def choose(name: str, folder: Path, requested: str, dtype: str, device: str, free: int | None, console: Any) -> str:
    """The mode to load ``folder`` in: ``requested``, or for ``auto`` the most precise that fits in
    ``free`` bytes; a mode that does not fit is one ModelUnavailable naming the modes that would."""
    method = published_method(folder)
    if method is not None:
        if requested not in ("none", "auto"):
            console.print(f"note: {name} is published quantized ({method}): it loads as published; "
                          f"engine.quantization = {requested} is not applied", highlight=False, markup=False)
        size = weightplan.checkpoint_size(folder)
        need = size.stored_bytes if size is not None else weights_bytes(folder)
        if free is not None and need * MARGIN > free:
            raise memory_error(name, dtype, device, method, {method: need}, free)
        return "none"
    sizes = needs(folder, dtype)
    if requested == "auto":
        usable = [m for m in weightplan.AUTO_ORDER if m in sizes and (m == "none" or torchao_installed())]
        for mode in usable:
            if free is None or (sizes[mode] * MARGIN <= free and _plan_holds(folder, dtype, sizes[mode], free)):
                if mode != "none":
                    console.print(f"note: engine.quantization = auto: {mode} ({_size(sizes[mode])} of weights; "
                                  f"{_size(free)} free on {device})", highlight=False, markup=False)
                return mode
        raise memory_error(name, dtype, device, "auto", sizes, free)
    need = sizes.get(requested, sizes["none"])
    if free is not None and need * MARGIN > free:
        raise memory_error(name, dtype, device, requested, sizes, free)
    return requested


def _plan_holds(folder: Path, dtype: str, weights: int, free: int) -> bool:
    """Whether the memory plan (memplan.py) of these weights holds one sequence of AUTO_CONTEXT positions
    (or the model's whole window, if shorter); True where the config does not give the plan's figures."""
    from clovercode.engine import memplan

    try:
        shape = memplan.shape_from_config(read_json_object(folder / "config.json"), dtype_bytes=ITEMSIZE.get(dtype, 2),
                                          weights_bytes=weights)
    except (ModelUnavailable, KeyError, TypeError, ValueError):
        return True
    wanted = min(AUTO_CONTEXT, shape.context_window or AUTO_CONTEXT)
    need = max(memplan.CHUNK_TOKENS, wanted // memplan.CHUNK_TOKENS * memplan.CHUNK_TOKENS)  # plans come in chunks
    return memplan.max_context(shape, free_bytes=free) >= need


def memory_error(name: str, dtype: str, device: str, mode: str, sizes: dict[str, int] | None,
                 free: int | None) -> ModelUnavailable:
    """Not enough memory, with what each mode would take and which fit."""
    in_mode = dtype if mode in ("none", "auto") else f"{mode} ({dtype} activations)"
    need = (sizes or {}).get(mode if mode != "auto" else "none")
    figures = f": it needs about {_size(need)} in {in_mode}, {_size(free)} are free on {device}" if need and free else ""
    others = {m: b for m, b in (sizes or {}).items() if m in weightplan.QUANTIZED_MODES or m == "none"}
    fitting = [m for m in weightplan.AUTO_ORDER if m in others and free is not None and others[m] * MARGIN <= free]
    table = ", ".join(f"{m} {_size(b)}" for m, b in others.items()) if len(others) > 1 else ""
    advice = (f"engine.quantization = {fitting[0]} fits ({table}). " if fitting else
              f"No weights mode fits ({table}); " if table else "")
    return ModelUnavailable(
        f"not enough memory to load {name}{figures}",
        hint=advice + "Free memory, choose a smaller dtype (engine.dtype = bfloat16), quantized weights "
        "(engine.quantization = int8, int4 or fp8; docs/engine.md, which card runs what), another device "
        "(engine.device), or run the model on a bigger machine behind an OpenAI-compatible server and use --endpoint.")


def _size(size: int) -> str:
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"

"""Snapshot and restore of a transformers cache around denoising passes.

A denoising pass runs the model over a block that is not final, and the model writes into its
cache as it goes. Committed state must not change, so each pass is bracketed by snapshot/restore:

* attention layers (``DynamicLayer`` and subclasses) grow by ``torch.cat``, which never touches the
  old tensors: the snapshot keeps references to them and restoring puts them back. Cost O(1).
  This is the "crop" of the attention cache, without copying.
* linear-attention layers (Gated DeltaNet, Mamba-like: ``LinearAttentionCacheLayerMixin``) update
  their conv and recurrent states in place: the snapshot clones those tensors and restoring copies
  them back into the same storage. Cost O(state), independent of the prompt length.
* any other tensor a layer holds besides its keys and values (token counters such as
  ``cumulative_length_linear``, which transformers 5.25 started to advance in place and to report
  from ``get_seq_length``) is state too: cloned and copied back, whatever its meaning in a given
  transformers release. Cost O(1).
* anything else (remote code, unknown cache classes): every reachable tensor is cloned and
  restored by value. Exact, but O(cache) per pass; ``layout`` reports it so the engine can warn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_LINEAR_DICTS = ("conv_states", "recurrent_states")
# Preallocated buffers (kvbuffer.BufferedLayer): only their used part, exposed as keys/values, is state.
SCRATCH = ("_key_buffer", "_value_buffer")
_LINEAR_FLAGS = ("has_previous_state", "is_conv_states_initialized", "is_recurrent_states_initialized",
                 "conv_kernel_size")
# Grown by torch.cat, never written in place: keeping the reference is the snapshot.
_APPENDED = ("keys", "values")


@dataclass
class Snapshot:
    kinds: list[str]
    saved: list[dict[str, Any]] = field(default_factory=list)


def _classes():
    from transformers.cache_utils import DynamicLayer, LinearAttentionCacheLayerMixin

    return DynamicLayer, LinearAttentionCacheLayerMixin


def _units(cache: Any) -> list[Any]:
    """The objects that hold state: the cache's layers, or the cache itself when it has none."""
    layers = getattr(cache, "layers", None)
    return list(layers) if isinstance(layers, list) and layers else [cache]


def layer_kind(layer: Any) -> str:
    dynamic, linear = _classes()
    is_linear, is_dynamic = isinstance(layer, linear), isinstance(layer, dynamic)
    if is_linear and is_dynamic:
        return "hybrid"
    if is_linear:
        return "linear"
    if is_dynamic:
        return "attention"
    if type(layer).__name__ == "DummyLayer":
        return "dummy"
    return "generic"


def layout(cache: Any) -> str:
    """"attention" (KV only), "hybrid" (some recurrent state) or "generic" (unknown: copied by value)."""
    kinds = {layer_kind(u) for u in _units(cache)} - {"dummy"}
    if "generic" in kinds:
        return "generic"
    return "hybrid" if kinds & {"linear", "hybrid"} else "attention"


def snapshot(cache: Any) -> Snapshot:
    snap = Snapshot([])
    for unit in _units(cache):
        kind = layer_kind(unit)
        snap.kinds.append(kind)
        if kind == "dummy":
            snap.saved.append({})
        elif kind == "generic":
            snap.saved.append({k: _deep_clone(v) for k, v in vars(unit).items()})
        else:
            saved = {k: _in_place_safe(k, v) for k, v in vars(unit).items()
                     if k not in _LINEAR_DICTS and k not in _LINEAR_FLAGS}
            if kind in ("linear", "hybrid"):
                for name in _LINEAR_DICTS:
                    saved[name] = {i: (t.clone() if t is not None else None) for i, t in getattr(unit, name).items()}
                for name in _LINEAR_FLAGS:
                    saved[name] = dict(getattr(unit, name))
            snap.saved.append(saved)
    return snap


def restore(cache: Any, snap: Snapshot) -> None:
    units = _units(cache)
    if len(units) != len(snap.kinds):
        raise RuntimeError("the cache changed shape between snapshot and restore")
    for unit, kind, saved in zip(units, snap.kinds, snap.saved):
        if kind == "generic":
            for name, value in saved.items():
                setattr(unit, name, _deep_clone(value))
            continue
        for name, value in saved.items():
            if name in _LINEAR_DICTS:
                _restore_states(getattr(unit, name), value)
            elif name in _LINEAR_FLAGS:
                setattr(unit, name, dict(value))
            elif isinstance(value, _Copied):
                _restore_copied(unit, name, value.tensor)
            else:
                setattr(unit, name, value)


@dataclass
class _Copied:
    """A tensor the layer may write in place: saved by value."""

    tensor: Any


def _in_place_safe(name: str, value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and name not in _APPENDED and name not in SCRATCH:
        return _Copied(value.clone())
    return value


def _restore_copied(unit: Any, name: str, saved: Any) -> None:
    current = getattr(unit, name, None)
    if current is not None and current.shape == saved.shape and current.dtype == saved.dtype:
        current.copy_(saved)  # same storage: a static address (graphs, dynamo marks) stays valid
    else:
        setattr(unit, name, saved.clone())


def _restore_states(live: dict, saved: dict) -> None:
    for index, tensor in saved.items():
        current = live.get(index)
        if tensor is None:
            live[index] = None
        elif current is not None and current.shape == tensor.shape and current.dtype == tensor.dtype:
            current.copy_(tensor)  # same storage: keeps static addresses valid
        else:
            live[index] = tensor.clone()
    for index in set(live) - set(saved):
        del live[index]


def _deep_clone(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, list):
        return [_deep_clone(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_deep_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _deep_clone(v) for k, v in value.items()}
    return value


def state_tensors(cache: Any) -> list[tuple[str, Any]]:
    """Every tensor the cache holds, named by where it sits (for bit-identity checks)."""
    import torch

    found: list[tuple[str, Any]] = []

    def walk(name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            found.append((name, value))
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(f"{name}[{i}]", v)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(f"{name}[{k!r}]", v)

    for index, unit in enumerate(_units(cache)):
        for key, value in vars(unit).items():
            if key not in SCRATCH:
                walk(f"layer{index}.{key}", value)
    return found

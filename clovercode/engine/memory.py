"""The memory plan of a loaded model on its device (engine/memplan.py does the arithmetic; this module
reads what it needs: the model's config and weights, and the device's free memory)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from clovercode.engine.config import EngineConfig
from clovercode.engine import memplan, weightplan
from clovercode.engine.memplan import MemoryPlan, ModelShape, plan, shape_from_config


def weights_bytes(model: Any) -> int:
    """What the model's parameters and buffers hold (quantized ones by their real parts)."""
    return sum(tensor_bytes(t) for t in (*model.parameters(), *model.buffers()))


def tensor_bytes(tensor: Any) -> int:
    """Bytes a tensor really holds: a tensor subclass (torchao's quantized weights) by its inner tensors,
    where ``numel × element_size`` would count the full-precision shape."""
    import torch

    inner = tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor  # a Parameter may wrap a subclass
    if type(inner) is not torch.Tensor and hasattr(inner, "__tensor_flatten__"):
        names, _ = inner.__tensor_flatten__()
        return sum(tensor_bytes(getattr(inner, name)) for name in names)
    return inner.numel() * inner.element_size()


def free_bytes(device: str) -> int | None:
    """Free memory where the model runs (engine/hostmemory.py: CUDA's, Metal's, else the host's
    available); None when nothing says. The one seam every plan reads it through."""
    from clovercode.engine.hostmemory import device_free_bytes

    return device_free_bytes(device)


UNKNOWN_FREE = 1 << 40  # nothing says what is free: plan as if plenty is (the request limits still hold)


def model_shape(model: Any, name: str) -> ModelShape | None:
    """The shape of a loaded transformers model; None when its config lacks the usual fields."""
    param = next(model.parameters(), None)
    if param is None:
        return None
    try:
        return shape_from_config(model.config, dtype_bytes=param.element_size(), weights_bytes=weights_bytes(model),
                                 name=name)
    except (TypeError, ValueError, AttributeError):
        return None


def engine_plan(model: Any, name: str, device: str, config: EngineConfig, slots: int, block: int,
                context_window: int) -> MemoryPlan | None:
    """The plan for ``slots`` batched sequences of this loaded model. Its weights already take device
    memory, so they are added back to what is free now: the plan counts them itself."""
    shape = model_shape(model, name)
    if shape is None:
        return None
    if context_window:
        shape = replace(shape, context_window=context_window)
    limit = min(config.max_context or shape.context_window, shape.context_window or config.max_context)
    return plan(shape, free_bytes=_free_or_plenty(device) + shape.weights_bytes, utilisation=config.memory_utilization,
                slots=slots, max_context=limit, max_batch_tokens=config.max_batch_tokens, block=block,
                prompt_cache_tokens=config.prompt_cache_tokens)


def _free_or_plenty(device: str) -> int:
    free = free_bytes(device)
    return UNKNOWN_FREE if free is None else free


# ---- the context limit the plan gives one sequence -------------------------------------------------

@dataclass(frozen=True)
class ContextLimit:
    """The most positions one sequence may hold on this device, from the memory plan (engine/memplan.py)
    for the memory free after the weights loaded; and what the other weights modes would allow."""

    positions: int  # at most the configured max_context and the model's window; 0: not one chunk fits
    wanted: int  # what the config and the window asked for
    free_bytes: int  # free after the weights, when planned
    device: str
    mode: str  # the weights mode loaded (engine.quantization)
    others: dict[str, int]  # a smaller weights mode → the positions it would allow
    single: bool = True  # one sequence in its own cache; False: a slot of a server's batch

    @property
    def from_plan(self) -> bool:
        """Whether memory, not the config or the window, sets the limit."""
        return self.positions < self.wanted

    def advice(self, need: int) -> str:
        """Which weights mode would hold ``need`` positions (the most precise), else the best there is."""
        fitting = [m for m in weightplan.AUTO_ORDER if self.others.get(m, 0) >= need]
        if fitting:
            mode = fitting[0]
            return f"{mode} weights would fit {self.others[mode]:,} positions (engine.quantization = {mode})"
        best = max(self.others.items(), key=lambda item: item[1], default=None)
        if best is not None and best[1] > self.positions:
            return (f"no weights mode holds {need:,} (the most: {best[0]}, {best[1]:,} positions, "
                    f"engine.quantization = {best[0]})")
        return "no smaller weights mode holds more"

    def describe(self) -> str:
        weights = "unquantized" if self.mode == "none" else self.mode
        return (f"the memory plan holds {self.positions:,} positions for "
                f"{'one sequence' if self.single else 'each slot of the batch'} on {self.device}, with "
                f"{self.free_bytes / memplan.GiB:.2f} GiB free after the {weights} weights (docs/engine.md, "
                "\"The memory plan\")")


def context_limit(model: Any, name: str, device: str, config: EngineConfig, block: int, context_window: int,
                  *, single: bool) -> ContextLimit | None:
    """The limit for one sequence: batch-1 in its own cache (``single``: the REPL, fix, exec, ACP), or a
    slot of a server's batch (prompts prefilled beside the slots, then copied in). None for a model whose
    config does not say its shape."""
    shape = model_shape(model, name)
    if shape is None:
        return None
    window = context_window or shape.context_window
    wanted = min(config.max_context or window, window or config.max_context)
    if not wanted:
        return None
    shape = replace(shape, context_window=wanted)
    free = _free_or_plenty(device)
    mode = str(getattr(model, "_clovercode_quantization", "none") or "none")

    def positions(weights: int) -> int:
        sized = replace(shape, weights_bytes=weights)
        return memplan.max_context(sized, free_bytes=free + shape.weights_bytes, utilisation=config.memory_utilization,
                                   block=block, prompt_cache_tokens=config.prompt_cache_tokens, single=single)

    here = positions(shape.weights_bytes)
    others: dict[str, int] = {}
    if here < wanted:  # what another weights mode would allow, from this model's parameters by group
        counts = parameter_counts(model)
        for other in weightplan.AUTO_ORDER:
            size = weightplan.weights_bytes(counts, other, shape.dtype_bytes)
            if other != mode and size < shape.weights_bytes:
                others[other] = positions(size)
    return ContextLimit(here, wanted, free, device, mode, others, single)


def parameter_counts(model: Any) -> weightplan.ParameterCounts:
    """The loaded model's parameters by group (as weightplan counts a checkpoint's), at their logical
    shapes: a quantized weight counts the parameters it stands for."""
    totals = dict.fromkeys(weightplan.GROUPS, 0)
    for key, tensor in model.named_parameters():
        totals[weightplan.group_of_key(key, list(tensor.shape))] += tensor.numel()
    return weightplan.ParameterCounts(**totals)

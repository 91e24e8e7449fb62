"""The memory plan of a loaded model on its device (engine/memplan.py does the arithmetic; this module
reads what it needs: the model's config and weights, and the device's free memory)."""

from __future__ import annotations

import os
from typing import Any

from clovercode.engine.config import EngineConfig
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


def free_bytes(device: str) -> int:
    """Free memory where the model runs: the CUDA device's, else the host's available memory."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not a POSIX host: assume plenty, the request limits still hold
        return 1 << 40


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
        from dataclasses import replace

        shape = replace(shape, context_window=context_window)
    limit = min(config.max_context or shape.context_window, shape.context_window or config.max_context)
    return plan(shape, free_bytes=free_bytes(device) + shape.weights_bytes, utilisation=config.memory_utilization,
                slots=slots, max_context=limit, max_batch_tokens=config.max_batch_tokens, block=block,
                prompt_cache_tokens=config.prompt_cache_tokens)

"""Quantized weights in the embedded engine (``engine.quantization``): torchao's ``quantize_`` for every
``nn.Linear`` (PyTorch-native, kernels on CPU and CUDA), engine/qexperts.py for the fused MoE experts
that no library reaches. Both happen while transformers loads the checkpoint, tensor by tensor (a
transformers quantizer of our own, registered as ``clovercode``): the full-precision model never
exists in memory, only the tensor being converted.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from clovercode.engine import qexperts
from clovercode.engine.memory import tensor_bytes
from clovercode.engine.weightplan import MODES, QUANTIZED_MODES
from clovercode.ground.errors import ModelUnavailable

QUANT_METHOD = "clovercode"


def keeps_full_precision(name: str) -> bool:
    """The output projection stays in ``engine.dtype`` in every mode. torchao's weight-only linears
    dequantize their whole weight on each forward where no fused kernel takes the shape: for Clover's
    248,320 × 2,048 head that is a 0.95 GiB (int8/int4) to 4.74 GiB (fp8) transient per pass, counted
    nowhere, to save 0.47 GiB of weights; and it is the last word on every token (llama.cpp's Q4_K_M
    keeps its output matrix at 6 bits). Embeddings are never quantized (they are not nn.Linear)."""
    return name == "lm_head" or name.endswith(".lm_head")


def torchao_missing(mode: str) -> ModelUnavailable:
    return ModelUnavailable(f"engine.quantization = {mode} needs torchao, which is not installed",
                            hint="pip install 'clovercode[quant]' (or pip install torchao), or set "
                            "engine.quantization = none.")


def linear_config(mode: str, device: str, in_features: int) -> Any:
    """torchao's config for one nn.Linear of ``in_features`` inputs on ``device`` (None: leave it)."""
    try:
        from torchao.quantization import Float8WeightOnlyConfig, Int4WeightOnlyConfig, Int8WeightOnlyConfig
    except ImportError:
        raise torchao_missing(mode) from None
    if mode == "int8":
        return Int8WeightOnlyConfig()
    if mode == "fp8":
        return Float8WeightOnlyConfig()
    group = qexperts.group_size(in_features)
    if group is None:
        return Int8WeightOnlyConfig()
    if device.startswith("cuda"):  # tinygemm's layout: torch's own int4 CUDA kernel
        return Int4WeightOnlyConfig(group_size=group, int4_packing_format="tile_packed_to_4d")
    from torchao.prototype.quantization.int4 import PrototypeInt4WeightOnlyConfig

    return PrototypeInt4WeightOnlyConfig(group_size=group)  # torch's int4 CPU kernel


def _quantizable_linear(name: str, module: nn.Module) -> bool:
    # a 1-wide gate (Qwen's shared_expert_gate) costs nothing and kernels want whole tiles
    return isinstance(module, nn.Linear) and module.out_features >= 16 and module.in_features >= 16


def quantize_linear(module: nn.Linear, name: str, mode: str, device: str) -> None:
    from torchao.quantization import quantize_

    quantize_(module, linear_config(mode, device, module.in_features), filter_fn=lambda m, fqn: True)
    from clovercode.engine import int8cpu

    int8cpu.attach(module)  # int8 on the CPU: the bytes multiplied as stored, no bf16 copy per forward


def quantize_model(model: nn.Module, mode: str, device: str) -> None:
    """Quantize a loaded model in place (the tests' models; loading uses :func:`quantization_config`)."""
    if mode not in QUANTIZED_MODES:
        return
    qexperts.replace_experts(model, mode, _dtype(model))
    for name, module in list(model.named_modules()):
        if _quantizable_linear(name, module) and not keeps_full_precision(name):
            quantize_linear(module, name, mode, device)


def _dtype(model: nn.Module) -> torch.dtype:
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


# ---- quantizing while transformers loads ----------------------------------------------------------------

@functools.cache
def _registered() -> type:
    """Register the ``clovercode`` quantization method with transformers (once) → its config class."""
    from transformers.core_model_loading import ConversionOps
    from transformers.quantizers import HfQuantizer
    from transformers.quantizers.auto import register_quantization_config, register_quantizer
    from transformers.utils.quantization_config import QuantizationConfigMixin

    @register_quantization_config(QUANT_METHOD)
    class CloverQuantConfig(QuantizationConfigMixin):
        def __init__(self, mode: str = "int8", device: str = "cpu", **kwargs: Any):
            self.quant_method = QUANT_METHOD
            self.mode, self.device = mode, device

        def to_dict(self) -> dict[str, Any]:
            return {"quant_method": QUANT_METHOD, "mode": self.mode, "device": self.device}

    class QuantizeOnLoad(ConversionOps):
        def __init__(self, quantizer: Any):
            self.quantizer = quantizer

        def convert(self, input_dict: dict[str, Any], source_patterns: Any = None, target_patterns: Any = None,
                    model: Any = None, full_layer_name: str = "", missing_keys: Any = None, **kwargs: Any):
            _, value = next(iter(input_dict.items()))
            value = value[0] if isinstance(value, list) else value
            module_name, _, param = full_layer_name.rpartition(".")
            module = model.get_submodule(module_name)
            config = self.quantizer.quantization_config
            if isinstance(module, qexperts.QuantizedExperts):
                module.set_weight(param, value)
            else:
                module._parameters[param] = nn.Parameter(value, requires_grad=False)
                quantize_linear(module, module_name, config.mode, config.device)
            for tensor in (*module.parameters(recurse=False), *module.buffers(recurse=False)):
                tensor._is_hf_initialized = True
            module._is_hf_initialized = True
            if missing_keys is not None:
                missing_keys.discard(full_layer_name)
            return {}

    @register_quantizer(QUANT_METHOD)
    class CloverQuantizer(HfQuantizer):
        requires_calibration = False

        def _process_model_before_weight_loading(self, model: Any, **kwargs: Any) -> None:
            config = self.quantization_config
            qexperts.replace_experts(model, config.mode, model.dtype)

        def param_needs_quantization(self, model: Any, param_name: str, **kwargs: Any) -> bool:
            module_name, _, param = param_name.rpartition(".")
            try:
                module = model.get_submodule(module_name)
            except AttributeError:
                return False
            if isinstance(module, qexperts.QuantizedExperts):
                return param in qexperts.EXPERT_PARAMS
            if keeps_full_precision(module_name):
                return False
            return param == "weight" and _quantizable_linear(module_name, module)

        def get_quantize_ops(self) -> Any:
            return QuantizeOnLoad(self)

        def _process_model_after_weight_loading(self, model: Any, **kwargs: Any) -> Any:
            model._clovercode_quantization = self.quantization_config.mode
            return model

        def is_serializable(self) -> bool:
            return False

        @property
        def is_trainable(self) -> bool:
            return False

    return CloverQuantConfig


def quantization_config(mode: str, device: str) -> Any:
    """The ``quantization_config`` that makes ``from_pretrained`` quantize while it loads."""
    if mode not in QUANTIZED_MODES:
        raise ValueError(f"quantization mode must be one of {', '.join(QUANTIZED_MODES)}, got {mode!r}")
    try:
        import torchao  # noqa: F401 - only whether it is there
    except ImportError:
        raise torchao_missing(mode) from None
    return _registered()(mode=mode, device=device)


# ---- what the loaded modules hold ------------------------------------------------------------------------

def group_of(name: str, module: nn.Module) -> str:
    if isinstance(module, qexperts.QuantizedExperts) or qexperts.is_fused_experts(module):
        return "experts"
    if isinstance(module, nn.Linear) and keeps_full_precision(name):
        return "lm_head"  # as engine/weightplan.py groups it (a tied head is counted with the embeddings)
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, nn.Embedding):
        return "embeddings"
    return "other"


def bytes_by_group(model: nn.Module) -> dict[str, dict[str, int]]:
    """Per module group: the bytes its parameters and buffers hold now, and what they would in bf16."""
    out: dict[str, dict[str, int]] = {}
    seen: set[int] = set()
    for name, module in model.named_modules():
        group = out.setdefault(group_of(name, module), {"bytes": 0, "bf16_bytes": 0, "parameters": 0})
        for tensor_name, tensor in (*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)):
            if id(tensor) in seen:  # tied weights count once
                continue
            seen.add(id(tensor))
            group["bytes"] += tensor_bytes(tensor)
            if isinstance(module, qexperts.QuantizedExperts) and tensor_name.endswith("_scale"):
                continue
            numel = _logical_numel(module, tensor_name, tensor)
            group["parameters"] += numel
            group["bf16_bytes"] += numel * 2
    return out


def _logical_numel(module: nn.Module, name: str, tensor: torch.Tensor) -> int:
    if isinstance(module, qexperts.QuantizedExperts) and name.endswith("_qdata"):
        return tensor.numel() * (2 if tensor.dtype == torch.uint8 else 1)
    return tensor.numel()


__all__ = ["MODES", "QUANTIZED_MODES", "bytes_by_group", "quantization_config", "quantize_model", "tensor_bytes"]

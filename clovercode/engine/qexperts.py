"""Weight-only quantized MoE experts: transformers 5 keeps a Qwen3.5-MoE / Qwen3-Next layer's experts as
two fused 3-D parameters (``gate_up_proj`` [E, 2I, H], ``down_proj`` [E, H, I]) that no library's
``nn.Linear`` swap reaches, yet they hold ~95 % of Clover's bytes. Here each expert's matrices are kept
as int8 (a scale per output row), int4 (two values a byte, a scale per group of the input dimension) or
float8 e4m3 (a scale per output row). A pass runs them loop-free (engine/groupedexperts.py, chosen by
engine/expertpath.py): the layer's hit experts dequantized together and two grouped GEMMs, float8's
grouped scaled GEMM on Hopper, or on the CPU int8 multiplied as stored (engine/int8cpu.py); the per-expert loop is kept only as the tests' reference.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

GROUP_SIZES = (128, 64, 32)  # int4 groups along the input dimension: the largest that divides it
FP8_MAX = 448.0  # float8 e4m3's largest finite value
EXPERT_PARAMS = ("gate_up_proj", "down_proj")


def group_size(columns: int) -> int | None:
    return next((g for g in GROUP_SIZES if columns % g == 0), None)


def pack(weight: torch.Tensor, mode: str, scale_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``weight`` [..., rows, columns] → its quantized parts (``qdata``, ``scale``), on its device."""
    w = weight.detach().float()
    if mode == "int4" and group_size(w.shape[-1]) is None:
        mode = "int8"  # no group divides the row: int8 keeps it exact to a row scale
    if mode == "int8":
        scale = w.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 127.0
        q = torch.round(w / scale).clamp_(-127, 127).to(torch.int8)
        return {"qdata": q, "scale": scale.to(scale_dtype)}
    if mode == "fp8":
        scale = w.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / FP8_MAX
        return {"qdata": (w / scale).to(torch.float8_e4m3fn), "scale": scale.to(scale_dtype)}
    if mode != "int4":
        raise ValueError(f"unknown expert quantization {mode!r}")
    g = group_size(w.shape[-1])
    grouped = w.reshape(*w.shape[:-1], w.shape[-1] // g, g)
    scale = grouped.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 7.0
    # symmetric 4-bit in [-8, 7], stored offset by 8 so that two fit one unsigned byte
    q = (torch.round(grouped / scale).clamp_(-8, 7) + 8).to(torch.uint8).reshape(w.shape)
    packed = q[..., 0::2] | (q[..., 1::2] << 4)
    return {"qdata": packed, "scale": scale.squeeze(-1).to(scale_dtype)}


def unpack(qdata: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The matrix (or matrices) that :func:`pack` made ``qdata`` and ``scale`` from, in ``dtype``."""
    if qdata.dtype == torch.uint8:  # int4, two a byte
        low = (qdata & 0x0F).to(dtype) - 8
        high = (qdata >> 4).to(dtype) - 8
        q = torch.stack((low, high), dim=-1).reshape(*qdata.shape[:-1], qdata.shape[-1] * 2)
        scale = scale if scale.dim() == qdata.dim() + 1 else scale.unsqueeze(-1)  # kept as [..., groups, 1]
        groups = scale.shape[-2]
        q = q.reshape(*q.shape[:-1], groups, q.shape[-1] // groups) * scale.to(dtype)
        return q.reshape(*q.shape[:-2], -1)
    return qdata.to(dtype) * scale.to(dtype)


def mode_of(qdata: torch.Tensor) -> str:
    return {torch.uint8: "int4", torch.int8: "int8"}.get(qdata.dtype, "fp8")


class QuantizedExperts(nn.Module):
    """A drop-in for transformers' fused experts (same ``forward(hidden, top_k_index, top_k_weights)``)
    whose two 3-D weights are quantized. Until :meth:`set_weight` receives a weight (while loading) the
    full-precision parameter stays, so loading code that looks the name up still finds it."""

    def __init__(self, experts: nn.Module, mode: str, compute_dtype: torch.dtype):
        super().__init__()
        self.num_experts = int(experts.num_experts)
        self.act_fn = experts.act_fn
        self.mode = mode
        self.compute_dtype = compute_dtype
        self.capture_safe = False  # set while passes are captured as CUDA graphs: static shapes only
        self._path: Any = None
        for name in EXPERT_PARAMS:
            self.register_parameter(name, getattr(experts, name))
        if getattr(experts, "gate_up_proj", None) is not None and experts.gate_up_proj.device.type != "meta":
            for name in EXPERT_PARAMS:
                self.set_weight(name, getattr(experts, name))

    def set_weight(self, name: str, weight: torch.Tensor) -> None:
        """Quantize ``weight`` (one of EXPERT_PARAMS, [E, out, in]) into this module's buffers, one expert
        at a time: the float32 temporaries are one expert's (2 MB of Clover's), not the layer's (6 GB)."""
        scale_dtype = self.compute_dtype if self.compute_dtype != torch.float64 else torch.float32
        first = pack(weight[0], self.mode, scale_dtype)
        parts = {k: v.new_empty((weight.shape[0], *v.shape)) for k, v in first.items()}
        for expert in range(weight.shape[0]):
            for key, value in (first if expert == 0 else pack(weight[expert], self.mode, scale_dtype)).items():
                parts[key][expert] = value
        if parts["qdata"].dtype == torch.uint8:  # int4: a group's scale kept as a column, ready to multiply
            parts["scale"] = parts["scale"].unsqueeze(-1)
        self._parameters.pop(name, None)
        for part, tensor in parts.items():
            self.register_buffer(f"{name}_{part}", tensor)

    @property
    def quantized(self) -> bool:
        return all(f"{name}_qdata" in self._buffers for name in EXPERT_PARAMS)

    def expert_weight(self, name: str, expert: Any, dtype: torch.dtype) -> torch.Tensor:
        return unpack(self._buffers[f"{name}_qdata"][expert], self._buffers[f"{name}_scale"][expert], dtype)

    def path(self, device: torch.device) -> Any:
        """The implementation this module's passes run on ``device`` (engine/expertpath.py), kept."""
        from clovercode.engine import expertpath

        key = (str(device), self.capture_safe)
        if self._path is None or self._path[0] != key:
            chosen = expertpath.choose(device.type, expertpath.capability_of(device), self.mode,
                                       expertpath.available_ops(), graphs=self.capture_safe)
            self._path = (key, chosen)
        return self._path[1]

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        from clovercode.engine import groupedexperts

        name = self.path(hidden_states.device).name
        inner = self._buffers["down_proj_qdata"].shape[-1]
        if name == "scaled_grouped_mm" and hidden_states.shape[-1] % 16 == 0 and inner % 16 == 0:
            # (the float8 kernel takes only widths in multiples of 16; others dequantize below)
            return groupedexperts.scaled_grouped(self, hidden_states, top_k_index, top_k_weights)
        if name == "int8_grouped_mm":
            from clovercode.engine import int8cpu

            buffers = self._buffers
            if int8cpu.takes(hidden_states, buffers["gate_up_proj_qdata"], buffers["gate_up_proj_scale"]):
                return int8cpu.experts(self, hidden_states, top_k_index, top_k_weights)
            # (float64, the tests' dtype, is not the kernel's: it dequantizes below)
        capacity = None
        if name == "dequant_grouped_fixed" or self.capture_safe:
            capacity = min(self.num_experts, top_k_index.numel())
        return groupedexperts.dequant_grouped(self, hidden_states, top_k_index, top_k_weights, capacity)

    def reference(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        """One expert at a time in Python (transformers' eager loop): what the paths are tested against."""
        from clovercode.engine import groupedexperts

        return groupedexperts.reference_loop(self, hidden_states, top_k_index, top_k_weights)


def is_fused_experts(module: nn.Module) -> bool:
    """transformers' fused-expert modules: 3-D ``gate_up_proj`` and ``down_proj`` and a gated activation."""
    params = [getattr(module, name, None) for name in EXPERT_PARAMS]
    return (all(isinstance(p, torch.Tensor) and p.dim() == 3 for p in params) and hasattr(module, "act_fn")
            and hasattr(module, "num_experts") and not isinstance(module, QuantizedExperts))


def replace_experts(model: nn.Module, mode: str, compute_dtype: torch.dtype) -> list[str]:
    """Swap every fused-experts module for a QuantizedExperts; the names of those swapped."""
    swapped = []
    for name, module in list(model.named_modules()):
        if is_fused_experts(module):
            parent, _, child = name.rpartition(".")
            model.get_submodule(parent).register_module(child, QuantizedExperts(module, mode, compute_dtype))
            swapped.append(name)
    return swapped


def make_capturable(model: nn.Module) -> int:
    """Switch every quantized experts module to a path with static shapes (CUDA graphs); how many."""
    modules = [m for m in model.modules() if isinstance(m, QuantizedExperts)]
    for module in modules:
        module.capture_safe = True
    return len(modules)

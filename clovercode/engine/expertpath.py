"""Which implementation runs a layer's MoE experts: a pure choice from the device, its compute
capability, the weights mode and the kernels torch offers, so that the CUDA choices are tested on a
machine without CUDA (docs/engine.md, "Quantized weights": which path, and why).

Every path here is loop-free: a constant number of tensor operations per layer, whatever the number of
experts a block hits (the CPU's ``int8_grouped_mm`` is one operator per projection, like torch's CPU
grouped GEMM; inside it, one kernel call per hit expert: engine/int8cpu.py). The one-expert-at-a-time loop (``groupedexperts.reference_loop``) is never chosen;
it is the reference the paths are tested against.
"""

from __future__ import annotations

from dataclasses import dataclass

# implementation → (capturable as a CUDA graph, what it does)
PATHS = {
    "weights_first_grouped_mm": (True, "the CPU's grouped GEMMs with each expert's weights as the left operand, "
                                       "read in place (engine/weightsfirst.py)"),
    "grouped_mm": (True, "transformers' grouped experts: torch's grouped GEMM over the routed rows"),
    "batched_mm": (True, "transformers' batched experts: each routed row's expert gathered, one batched matmul"),
    "scaled_grouped_mm": (True, "float8 experts through torch's grouped scaled GEMM, never dequantized"),
    "dequant_grouped": (False, "the layer's hit experts dequantized together, two grouped GEMMs"),
    "dequant_grouped_fixed": (True, "a fixed number of experts (the hit ones first) dequantized, two grouped GEMMs"),
    "int8_grouped_mm": (False, "int8 experts multiplied as stored (clovercode's native kernel where the machine "
                                "built it, else torch's CPU int8 weight-only kernel), never dequantized"),
}
LOOP = "loop"  # the reference: never a choice


@dataclass(frozen=True)
class ExpertPath:
    name: str
    why: str

    @property
    def capturable(self) -> bool:
        return PATHS[self.name][0]


def candidates(device_type: str, capability: tuple[int, int] | None, mode: str, graphs: bool) -> list[ExpertPath]:
    """The implementations to try, best first (the fallback chain), before asking what torch offers."""
    cuda = device_type == "cuda"
    ampere = cuda and capability is not None and capability >= (8, 0)
    if mode == "none":
        # on the CPU, torch's grouped GEMM re-packs the right-hand operand on every call: the weights
        # go on the left there (engine/weightsfirst.py); CUDA keeps transformers' grouped GEMM
        found = [] if cuda else [ExpertPath("weights_first_grouped_mm", "CPU: grouped GEMM, weights read in place")]
        if ampere or not cuda:
            found.append(ExpertPath("grouped_mm", "grouped GEMM (sm80+ on CUDA; torch's CPU kernel)"))
        return found + [ExpertPath("batched_mm", "no grouped GEMM here: batched matmul")]
    out = []
    # torch's grouped float8 GEMM is built for sm90 (Hopper) and sm100 (data-centre Blackwell), not for
    # consumer Blackwell (sm120) or Ada (sm89), whose float8 has no grouped kernel in torch
    if mode == "fp8" and cuda and capability is not None and capability[0] in (9, 10):
        out.append(ExpertPath("scaled_grouped_mm", "Hopper/Blackwell grouped float8 GEMM"))
    # int8/int4 on CUDA: no maintained fused dequantize-inside-the-grouped-GEMM kernel installs with the
    # quant extra (docs/engine.md), so the dequantizing paths are the whole chain (no optional kernel).
    # int8 on the CPU: torch's weight-only int8 kernel reads the stored int8 bytes, no bf16 copy written
    # (engine/int8cpu.py); a CPU has no launches, so its call per hit expert inside one operator costs
    # microseconds. Never on CUDA: there each call would be a kernel launch
    if mode == "int8" and device_type == "cpu" and not graphs:
        out.append(ExpertPath("int8_grouped_mm", "CPU: int8 weights multiplied as stored, no dequantized copy"))
    if graphs:
        out.append(ExpertPath("dequant_grouped_fixed", "CUDA graphs need static shapes: fixed expert capacity"))
    else:
        out.append(ExpertPath("dequant_grouped", "dequantize the hit experts, grouped GEMM"))
    return out


def choose(device_type: str, capability: tuple[int, int] | None, mode: str, available: frozenset[str],
           graphs: bool = False) -> ExpertPath:
    """The first of :func:`candidates` whose kernel torch offers (``available``: ``grouped_mm``,
    ``scaled_grouped_mm``, ``weight_int8pack_mm``); the dequantizing paths need only ``grouped_mm`` or a batched matmul."""
    for path in candidates(device_type, capability, mode, graphs):
        needs = {"grouped_mm": "grouped_mm", "weights_first_grouped_mm": "grouped_mm",
                 "scaled_grouped_mm": "scaled_grouped_mm", "int8_grouped_mm": "weight_int8pack_mm"}.get(path.name)
        if needs is None or needs in available:
            return path
    raise AssertionError("the chain ends in a path that needs no optional kernel")  # pragma: no cover


def available_ops() -> frozenset[str]:
    """The optional kernels this torch has."""
    import torch

    found = set()
    if hasattr(torch.nn.functional, "grouped_mm") or hasattr(torch, "_grouped_mm"):
        found.add("grouped_mm")
    if hasattr(torch, "_scaled_grouped_mm"):
        found.add("scaled_grouped_mm")
    if hasattr(torch, "_weight_int8pack_mm"):
        found.add("weight_int8pack_mm")
    return frozenset(found)


def capability_of(device: object) -> tuple[int, int] | None:
    """The CUDA compute capability of ``device`` (None off CUDA)."""
    import torch

    device = torch.device(device)  # type: ignore[arg-type]
    if device.type != "cuda":
        return None
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def apply_unquantized(model: object, device_type: str, capability: tuple[int, int] | None) -> str | None:
    """For a model whose fused experts stay unquantized: transformers' default, the grouped GEMM, has on
    CUDA before sm80 only a fallback that loops over the experts; switch those to its batched matmul.
    On the CPU, transformers' grouped GEMM becomes the weights-first one in bf16 / fp16 where every
    experts module fits it (layout, widths); float32 keeps it (weights-first measured slower there), and
    an implementation asked for by name (eager, batched) is kept. Returns
    the implementation set (None: transformers' own choice kept)."""
    fused = [m for m in model.modules() if _fused(m)]  # type: ignore[attr-defined]
    if device_type not in ("cuda", "cpu") or not fused:
        return None
    path = choose(device_type, capability, "none", available_ops())
    if path.name == "weights_first_grouped_mm":
        from clovercode.engine import weightsfirst

        current = getattr(getattr(model, "config", None), "_experts_implementation", None)
        dtypes = {m.gate_up_proj.dtype for m in fused}
        if current != "grouped_mm" or not dtypes <= set(weightsfirst.FASTER) \
                or not all(weightsfirst.experts_fit(m, m.gate_up_proj.dtype) for m in fused):
            return None
        weightsfirst.register()
    elif path.name == "grouped_mm":
        return None
    model.set_experts_implementation(path.name)  # type: ignore[attr-defined]
    return path.name


def _fused(module: object) -> bool:
    """transformers' fused experts, unquantized: a 3-D ``gate_up_proj`` parameter (qexperts.py's
    is_fused_experts, which this module cannot import: qexperts imports it)."""
    weight = getattr(module, "gate_up_proj", None)
    return getattr(weight, "dim", lambda: 0)() == 3 and hasattr(module, "act_fn")

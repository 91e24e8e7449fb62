"""Checkpoints published quantized (config.json's ``quantization_config``): each known method either
loads through transformers' own quantizer, where that quantizer's package and kernels are installed and
run on this device, or is refused naming the method, what it needs, and what clovercode can load
instead. No word of remote code: a quantization config is data transformers reads, not the model's code
(engine/archmap.py accepts the key; this module decides).

An allowlist: a ``quant_method`` not listed here is refused naming it (transformers knows more methods,
but none of the others was checked to run the engine's passes). A malformed ``quantization_config`` (not
an object, no ``quant_method``, a known field of the wrong type) is refused as a broken checkpoint.
Both are ModelUnavailable: exit 5, as any model that cannot load.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from clovercode.engine.sources import read_json_object
from clovercode.ground.errors import ModelUnavailable

INSTEAD = ("clovercode can load the unquantized (bf16) checkpoint instead and quantize it while loading "
           "(engine.quantization = int8, int4 or fp8; docs/engine.md)")


@dataclass(frozen=True)
class Method:
    label: str  # how people name it
    packages: tuple[str, ...]  # import names transformers' quantizer needs
    devices: tuple[str, ...]  # where its kernels run ("cuda", "cpu", "mps")
    fields: Mapping[str, tuple[type, ...]]  # known fields and the types they may hold
    needs: str  # what to install, in words


_BITS = {"bits": (int,), "group_size": (int,), "zero_point": (bool,), "desc_act": (bool,), "sym": (bool,),
         "version": (str,), "backend": (str, type(None)), "modules_to_not_convert": (list, type(None))}
METHODS: dict[str, Method] = {
    "fp8": Method("fp8 (block-wise, FineGrainedFP8)", ("accelerate",), ("cuda",),
                  {"weight_block_size": (list, type(None)), "activation_scheme": (str,), "fmt": (str,),
                   "modules_to_not_convert": (list, type(None)), "dequantize": (bool,)},
                  "a CUDA GPU (compute capability 8.9 or newer for fp8 kernels; older ones dequantize to bf16)"),
    "compressed-tensors": Method("compressed-tensors", ("compressed_tensors",), ("cuda",),
                                 {"config_groups": (dict, type(None)), "format": (str, type(None)),
                                  "quantization_status": (str, type(None)), "ignore": (list, type(None)),
                                  "kv_cache_scheme": (dict, type(None)), "sparsity_config": (dict, type(None))},
                                 "the compressed-tensors package and a CUDA GPU"),
    "awq": Method("AWQ", ("gptqmodel",), ("cuda",), _BITS, "the gptqmodel package and a CUDA GPU"),
    "gptq": Method("GPTQ", ("optimum", "gptqmodel"), ("cuda", "cpu"), _BITS, "the optimum and gptqmodel packages"),
    "bitsandbytes": Method("bitsandbytes", ("bitsandbytes",), ("cuda",),
                           {"load_in_4bit": (bool,), "load_in_8bit": (bool,), "bnb_4bit_quant_type": (str,),
                            "bnb_4bit_use_double_quant": (bool,), "bnb_4bit_compute_dtype": (str, type(None)),
                            "llm_int8_skip_modules": (list, type(None))},
                           "the bitsandbytes package and a CUDA GPU"),
    "torchao": Method("torchao", ("torchao",), ("cuda", "cpu"),
                      {"quant_type": (dict, str), "modules_to_not_convert": (list, type(None))},
                      "the torchao package (the quant extra)"),
    "fbgemm_fp8": Method("FBGEMM fp8", ("fbgemm_gpu",), ("cuda",), {"activation_scale_ub": (int, float)},
                         "the fbgemm-gpu package and a CUDA GPU"),
    "mxfp4": Method("MXFP4", ("kernels",), ("cuda",), {"modules_to_not_convert": (list, type(None))},
                    "the kernels package (Triton MXFP4 kernels) and a CUDA GPU"),
}
ALIASES = {"compressed_tensors": "compressed-tensors", "bitsandbytes_4bit": "bitsandbytes",
           "bitsandbytes_8bit": "bitsandbytes"}


@dataclass(frozen=True)
class Published:
    method: str  # the allowlisted quant_method
    label: str  # with the variant (bitsandbytes 4-bit)


def quantization_config(config: Mapping[str, Any]) -> tuple[Any, bool]:
    """(``quantization_config`` of a config.json object or of its ``text_config``, whether present)."""
    for holder in (config, config.get("text_config")):
        if isinstance(holder, Mapping) and "quantization_config" in holder:
            return holder["quantization_config"], True
    return None, False


def check(folder: Path, name: str, device: str, installed: Callable[[str], bool] | None = None) -> Published | None:
    """None for a checkpoint not published quantized; its method when transformers' quantizer loads it
    here; else ModelUnavailable naming the method (or the malformation)."""
    path = folder / "config.json"
    if not path.is_file():
        return None
    found, present = quantization_config(read_json_object(path))
    if not present:
        return None
    published = parse(found, name)
    method = METHODS[published.method]
    have = installed or _installed
    missing = [p for p in method.packages if not have(p)]
    kind = "cuda" if device.startswith("cuda") else device
    if kind not in method.devices or missing:
        why = (f"it runs on {' or '.join(d.upper() if d == 'cuda' else d for d in method.devices)}, not on {device}"
               if kind not in method.devices else f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
               "not installed")
        raise ModelUnavailable(f"{name}: this checkpoint is quantized with {published.label}; {published.label} needs "
                               f"{method.needs} ({why})", hint=f"Use {INSTEAD}.")
    return published


def parse(found: Any, name: str) -> Published:
    """The allowlisted method of a ``quantization_config`` value; ModelUnavailable when it is malformed
    or its method is not one clovercode loads."""
    if not isinstance(found, Mapping):
        raise _malformed(name, f"it is {type(found).__name__}, not an object")
    raw = found.get("quant_method")
    if raw is None:
        raise _malformed(name, "it has no quant_method")
    if not isinstance(raw, str):
        raise _malformed(name, f"its quant_method is {type(raw).__name__}, not a string")
    key = ALIASES.get(raw.strip().lower(), raw.strip().lower())
    method = METHODS.get(key)
    if method is None:
        shown = raw if raw.isprintable() and len(raw) <= 40 else repr(raw[:40])
        raise ModelUnavailable(f"{name}: this checkpoint is quantized with {shown!r}, a method clovercode does not load "
                               f"(it loads {', '.join(m.label for m in METHODS.values())})", hint=f"Use {INSTEAD}.")
    for field, types in method.fields.items():
        if field in found and (not isinstance(found[field], types) or isinstance(found[field], bool) and bool not in types):
            raise _malformed(name, f"its {field} is {type(found[field]).__name__}, not "
                             f"{' or '.join('null' if t is type(None) else t.__name__ for t in types)}")
    label = method.label
    if key == "bitsandbytes":
        four, eight = found.get("load_in_4bit") is True, found.get("load_in_8bit") is True
        if four == eight:
            raise _malformed(name, "a bitsandbytes config must set exactly one of load_in_4bit and load_in_8bit")
        label = f"bitsandbytes {'4' if four else '8'}-bit"
    if key in ("awq", "gptq") and found.get("bits") not in (None, 2, 3, 4, 8):
        raise _malformed(name, f"its bits is {found.get('bits')!r}, not 2, 3, 4 or 8")
    return Published(key, label)


def _malformed(name: str, why: str) -> ModelUnavailable:
    return ModelUnavailable(f"{name}: config.json's quantization_config is malformed: {why}",
                            hint="The checkpoint is damaged or was not written by a quantizer; download it again, "
                            f"or use {INSTEAD}.")


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False

"""Load a resolved model: device and dtype, GGUF conversion (once), memory check, progress display,
and the model's diffusion metadata. Every failure a user can fix is one ModelUnavailable."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import pickle
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from rich.console import Console

from clovercode.engine import prequant, quantmode
from clovercode.engine.config import EngineConfig
from clovercode.engine.sources import ModelSource, engine_missing, converted_dir, read_json_object
import clovercode.ground.boundedjson as boundedjson
from clovercode.ground.errors import ModelUnavailable
from clovercode.trust import models as trust_models
from clovercode.ground.heartbeat import HEARTBEAT_SECONDS, Heartbeat

BLOCK_SIZE_KEYS = ("block_size", "bd_size", "block_length", "diffusion_block_size")


@dataclass(frozen=True)
class ModelInfo:
    name: str
    mask_token_id: int | None  # None: autoregressive only
    block_size: int | None  # the model's own block size, when it says
    logit_shift: bool
    eos_ids: frozenset[int]
    context_window: int
    device: str
    dtype: str
    sliding_window: bool = False

    @property
    def diffusion_capable(self) -> bool:
        return self.mask_token_id is not None


def pick_device(requested: str) -> str:
    import torch

    if requested != "auto":
        if requested.startswith("cuda") and not torch.cuda.is_available():
            raise ModelUnavailable(f"engine.device is {requested}, but no CUDA device is available",
                                   hint="Set engine.device = auto (or cpu), or install the CUDA build of torch.")
        if requested == "mps" and not torch.backends.mps.is_available():
            raise ModelUnavailable("engine.device is mps, but MPS is not available", hint="Set engine.device = auto.")
        return requested
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def pick_dtype(requested: str, device: str) -> str:
    """bf16 on GPUs that have it (fp16 otherwise), float32 on CPU."""
    if requested != "auto":
        return requested
    if device.startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float16" if device == "mps" else "float32"


def load(source: ModelSource, config: EngineConfig, console: Console, cache_root: Path) -> tuple[Any, Any, ModelInfo]:
    """(model, tokenizer, info) for ``source``, on the chosen device, in eval mode."""
    try:
        import torch
        import transformers
    except ImportError:
        raise engine_missing() from None
    device = pick_device(config.device)
    if source.kind != "gguf":  # published quantized: loads through transformers' quantizer here, or refused by name
        prequant.check(source.path, source.name, device)
    native = native_class(source) if source.needs_trust else Native(None)
    trust = _check_trust(source, config, console, native)
    dtype = pick_dtype(config.dtype, device)
    with _progress(console, f"Loading {source.name}") as step:
        folder = source.path
        if source.kind == "gguf":
            folder = convert_gguf(source.path, cache_root, step)
        mode = quantmode.choose(source.name, folder, config.quantization, dtype, device, free_memory(device), console)
        step("tokenizer")
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=trust)
            check_chat_template(source.name, tokenizer)
            step(f"weights ({dtype}{'' if mode == 'none' else ', ' + mode + ' while loading'}, {device})")
            kwargs = weights_kwargs(getattr(torch, dtype), device, trust)
            if mode != "none":
                from clovercode.engine import quantize

                kwargs["quantization_config"] = quantize.quantization_config(mode, device)
            if native.config is not None and not trust:  # a config of its own, read as transformers' architecture
                kwargs["config"] = native.config
            model, report = _load_weights(transformers, folder, kwargs)
            if native.cls and not trust:
                _check_native_fit(source, model, report)
            if "device_map" not in kwargs:
                model.to(device)
            model.eval()
            model._clovercode_quantization = mode
            _grouped_attention(model, console)
            _gdn_kernels(model, device, console)
            from clovercode.engine import weightsfirst  # the LM head stays unquantized in every mode

            weightsfirst.install_head(model, device)
            if mode == "none":  # quantized experts choose their own path (engine/expertpath.py)
                from clovercode.engine import expertpath

                expertpath.apply_unquantized(model, device.split(":")[0], expertpath.capability_of(device))
        except torch.OutOfMemoryError:
            raise quantmode.memory_error(source.name, dtype, device, mode, None, None) from None
        except _load_errors() as exc:
            raise load_failure(source.name, folder, exc) from None
    return model, tokenizer, model_info(source.name, model, tokenizer, device, dtype)


def _grouped_attention(model: Any, console: Console) -> None:
    """Masked grouped-query attention without repeated keys and values, where a route is exact here
    (engine/attention.py); the choice is kept on the model, and said when a grouped model keeps the plain path."""
    from clovercode.engine import attention

    choice = attention.install(model)
    model._clovercode_attention = choice
    if choice.route == "plain" and "grouped" not in choice.why and "not sdpa" not in choice.why:
        console.print(f"note: masked attention repeats keys and values per query head here ({choice.why})",
                      highlight=False, markup=False)


def _gdn_kernels(model: Any, device: str, console: Console) -> None:
    """Which kernels the Gated DeltaNet layers run (engine/gdnkernels.py; transformers picks them): kept on
    the model as the load summary's line, and said where there is a choice (off the CPU, where the
    fallbacks are the only path and the line would be noise on every load)."""
    from clovercode.engine import gdncpu, gdnkernels

    gdncpu.install(model, device)
    line = gdnkernels.summary(device.split(":")[0], gdnkernels.kernels_in_use(model))
    model._clovercode_gdn = line
    if line is not None and not device.startswith("cpu"):
        console.print(f"note: {line}", highlight=False, markup=False)


def _load_errors() -> tuple[type[BaseException], ...]:
    """What transformers, torch and safetensors raise for model files that are damaged or hostile."""
    return (OSError, ValueError, KeyError, ImportError, TypeError, RuntimeError, pickle.UnpicklingError,
            _weights_error(), _template_error())


def load_failure(name: str, folder: Path, exc: BaseException) -> ModelUnavailable:
    """One model error that says which file is bad and why."""
    hint = "Check that the directory holds a complete transformers model (config.json, tokenizer, weights)."
    if isinstance(exc, pickle.UnpicklingError):
        files = ", ".join(sorted(p.name for p in folder.glob("*") if p.suffix in (".bin", ".pt", ".pth"))) or "weights"
        return ModelUnavailable(
            f"model {name} was refused: its pickle weights ({files}) hold more than plain tensors, and unpickling "
            f"them could run code ({_first_line(exc)[:120]})",
            hint="clovercode reads pickle weights only as plain tensors (torch.load weights_only). Use a model "
            "published as *.safetensors, or convert this one where you trust it.")
    if isinstance(exc, _template_error()):
        return template_failure(name, exc)
    if isinstance(exc, _weights_error()):
        files = ", ".join(sorted(p.name for p in folder.glob("*.safetensors"))) or "weights"
        return ModelUnavailable(f"model {name}: a weights file is damaged ({files}): {_first_line(exc)}",
                                hint="Download or copy the *.safetensors files again.")
    return ModelUnavailable(f"model {name} could not be loaded from {folder}: {_first_line(exc)}", hint=hint)


def template_failure(name: str, exc: BaseException) -> ModelUnavailable:
    kind = {"SecurityError": "tried to leave the template sandbox",
            "TemplateLimit": "went past its limits"}.get(type(exc).__name__, "is broken")
    return ModelUnavailable(f"model {name} was refused: its chat template {kind} ({_first_line(exc)})",
                            hint="The chat template (chat_template.jinja or tokenizer_config.json) comes with the "
                            "model; use a model whose template you trust.")


def _template_error() -> type[Exception]:
    try:
        from jinja2 import TemplateError
    except ImportError:  # pragma: no cover - jinja2 comes with transformers' chat templates
        return OSError
    return TemplateError


def check_chat_template(name: str, tokenizer: Any) -> None:
    """Render the chat template once for a plain conversation, so a template that breaks out of its
    sandbox, or does not parse, is a model error at load time rather than a crash at the first turn.
    Other refusals of this probe (a template that raises for its own reasons) wait for real messages."""
    if not getattr(tokenizer, "chat_template", None):
        return
    from jinja2.exceptions import SecurityError, TemplateSyntaxError

    from clovercode.engine.chat import template_source
    from clovercode.engine.template import chat_variables, render

    try:  # with the limits every later prompt gets (engine/template.py)
        render(template_source(tokenizer, False) or "", chat_variables(
            tokenizer, [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], None))
    except (SecurityError, TemplateSyntaxError) as exc:
        raise template_failure(name, exc) from None
    except Exception:  # noqa: BLE001 - judged on real messages later (chat.render_prompt)
        return


@dataclass(frozen=True)
class Native:
    """How a model that ships code loads without it: transformers' class, and its config object when the
    config's own ``model_type`` is unknown to transformers but its fields map onto an architecture
    (engine/archmap.py); ``why`` says why not when ``cls`` is None."""

    cls: str | None
    config: Any = None
    why: str = ""


def native_class(source: ModelSource) -> Native:
    """The transformers class that loads this model without its own code (``cls`` None: none does).

    Sound only where the config is all that differs: its ``model_type`` is one transformers knows for
    causal LMs (or its fields are exactly one such architecture's: a Clover-shaped config, archmap.py),
    its ``architectures`` (when given) are transformers classes, and its tokenizer needs no code
    either. A block-diffusion fine-tune of such a model keeps its diffusion metadata (mask token,
    block size, logit shift) in the config, which the engine reads itself; whether the weights fit the
    class exactly is checked after loading (:func:`_check_native_fit`)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    from clovercode.engine import archmap

    config = read_json_object(source.path / "config.json")
    model_type = config.get("model_type")
    mapped = None
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING_NAMES:
        mapping = archmap.map_config(config)
        if mapping.model_type is None:
            return Native(None, why=f"model_type {model_type!r} is not transformers' and its fields map onto no "
                          f"architecture of it ({mapping.why})")
        model_type, mapped = mapping.model_type, archmap.native_config(config, mapping.model_type)
    cls = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    architectures = config.get("architectures") or []
    if not cls or (mapped is None and (not isinstance(architectures, list) or not all(
            isinstance(a, str) and hasattr(transformers, a) for a in architectures))):
        return Native(None, why="its config names a class transformers does not have")
    tokenizer_file = source.path / "tokenizer_config.json"
    tokenizer = read_json_object(tokenizer_file) if tokenizer_file.is_file() else {}
    if "auto_map" in tokenizer:
        name = tokenizer.get("tokenizer_class")
        if not isinstance(name, str) or not (tokenizer_class_from_name(name) or tokenizer_class_from_name(name + "Fast")):
            return Native(None, why="its tokenizer needs its own code")
    return Native(cls, mapped)


def _check_native_fit(source: ModelSource, model: Any, info: dict[str, Any]) -> None:
    """transformers' own class must account for every weight of the checkpoint and find all of its
    own: otherwise the model's code does something the class does not, and its output would be wrong."""
    extra = list(info.get("unexpected_keys") or [])
    missing = list(info.get("missing_keys") or [])
    mismatched = [str(m[0]) if isinstance(m, tuple) else str(m) for m in info.get("mismatched_keys") or []]
    if extra or missing or mismatched:
        parts = [f"{label} {', '.join(sorted(keys)[:3])}{' …' if len(keys) > 3 else ''}"
                 for label, keys in (("unexpected", extra), ("missing", missing), ("mismatched", mismatched)) if keys]
        raise trust_models.refusal(source.name, source.path, source.repo_id, source.revision,
                                   f"its weights do not fit transformers' own {type(model).__name__}: "
                                   + "; ".join(parts))


def _weights_error() -> type[Exception]:
    """What the safetensors reader raises for a damaged file (it is no OSError or ValueError)."""
    try:
        from safetensors import SafetensorError
    except ImportError:  # pragma: no cover - safetensors comes with transformers
        return OSError
    return SafetensorError


def weights_kwargs(dtype: Any, device: str, trust: bool) -> dict[str, Any]:
    """``from_pretrained`` arguments. Off the CPU the weights go straight to the device
    (``device_map``, through accelerate), shard by shard in the chosen dtype: a 35B model is never
    all in host RAM first. On the CPU transformers' plain path loads them where they stay.

    ``use_kernels=False``: from 5.25, transformers fetches and runs kernels from the Hugging Face Hub
    at load time by default wherever the ``kernels`` package is installed. That is code neither the
    user nor the model folder supplied (and offline it fails the load); the fast GPU paths come from
    the locally installed ``gpu`` extra instead."""
    kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": trust, "attn_implementation": "sdpa",
                              "use_kernels": False}
    if device != "cpu":
        kwargs["device_map"] = device
    return kwargs


def _load_weights(transformers: Any, folder: Path, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(model, transformers' loading report: missing / unexpected / mismatched weights). sdpa attention
    (it honours custom 4D masks); a model's own code that has no sdpa path keeps its own."""
    try:
        model, info = transformers.AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True, **kwargs)
    except ValueError as exc:
        if not kwargs["trust_remote_code"] or "sdpa" not in str(exc).lower():
            raise
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            folder, output_loading_info=True, **{k: v for k, v in kwargs.items() if k != "attn_implementation"})
    return model, info


def _check_trust(source: ModelSource, config: EngineConfig, console: Console, native: Native) -> bool:
    """Whether the model's own code runs: only for a model the user named in engine.trust_remote_code.
    A model that is not named loads with transformers' own class where its config maps onto one, and is
    refused (with the line that would trust it) where it does not."""
    if not source.needs_trust:
        return False
    if trust_models.is_trusted(config.trust_remote_code, source.path, source.repo_id, source.revision):
        console.print(f"[yellow]warning[/]: loading {source.name} with its own Python code (you trust it in "
                      "engine.trust_remote_code): that code runs with your permissions.", highlight=False)
        return True
    if native.cls is None:
        raise trust_models.refusal(source.name, source.path, source.repo_id, source.revision,
                                   "its config names code to import and no class of transformers' own fits it: "
                                   + native.why)
    names = "whose architecture its config's fields are" if native.config is not None else "which its config names"
    console.print(f"note: {source.name} ships its own Python code; it was not run: the model loads with "
                  f"transformers' own {native.cls}, {names}.", highlight=False)
    return False


@contextlib.contextmanager
def _progress(console: Console, title: str) -> Iterator[Any]:
    """A live status line; ``step(text)`` updates it. transformers' own bars (the GGUF reader's too)
    are silenced meanwhile. Where the console is no terminal, each step is a line of its own, a
    heartbeat repeats the current one every ~10 s, and the end says how long it all took."""
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with _quiet_gguf_reader():
            if console.is_terminal:
                with console.status(f"{title}…", spinner="dots") as status:
                    yield lambda text: status.update(f"{title}: {text}…")
            else:
                with _plain_progress(console, title) as step:
                    yield step
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def _plain_progress(console: Console, title: str, every: float = HEARTBEAT_SECONDS) -> Iterator[Any]:
    started = time.monotonic()
    current = [""]

    def say(text: str) -> None:
        console.print(text, highlight=False, markup=False, soft_wrap=True)

    def step(text: str) -> None:
        current[0] = text
        say(f"{title}: {text}…")

    def beat() -> str:
        return f"{title}: {current[0] or 'starting'}… {time.monotonic() - started:.0f} s"

    say(f"{title}…")
    with Heartbeat(beat, say, every):
        yield step
    say(f"{title}: done in {time.monotonic() - started:.0f} s")


@contextlib.contextmanager
def _quiet_gguf_reader() -> Iterator[None]:
    """transformers' GGUF reader draws its own bar with ``tqdm.auto``, which its
    ``disable_progress_bar`` does not reach: over our status line it scrolls. Silence that one bar."""
    try:
        from transformers import modeling_gguf_pytorch_utils as reader
    except ImportError:  # pragma: no cover - a transformers without GGUF support fails later, clearly
        yield
        return
    bar = getattr(reader, "tqdm", None)
    if bar is None:
        yield
        return
    reader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        reader.tqdm = bar


def convert_gguf(gguf: Path, cache_root: Path, step: Any = lambda text: None) -> Path:
    """A transformers directory converted from ``gguf`` once, kept under ``cache_root``."""
    target = converted_dir(gguf, cache_root)
    if (target / "config.json").is_file():
        return target
    trust_models.check_gguf(gguf)  # a header lying about its counts is refused before the reader trusts it
    import torch
    import transformers

    step(f"converting {gguf.name} ({gguf.stat().st_size / 2**20:.0f} MB) into a transformers model, once "
         "(later starts reuse it)")
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                                     use_kernels=False)
        # The weights are dequantized by now; drop the GGUF marker so the plain tensors can be saved.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "clovercode-source.json").write_text(json.dumps({"gguf": str(gguf)}), encoding="utf-8")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        try:
            tmp.rename(target)
        except OSError:  # another process converted it meanwhile
            if not (target / "config.json").is_file():
                raise
    except OSError as exc:
        raise ModelUnavailable(f"converting {gguf.name} failed: {exc}",
                               hint=f"Check that {cache_root} is writable (or set engine.cache_dir).") from None
    except (ValueError, KeyError, RuntimeError, struct.error, IndexError, OverflowError, TypeError, EOFError,
            MemoryError) as exc:  # what the GGUF reader raises on a file that lies about its contents
        raise ModelUnavailable(f"{gguf} could not be read as a GGUF model: {_first_line(exc) or type(exc).__name__}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def parameter_count(folder: Path) -> int | None:
    """Parameters from the safetensors headers (no weights read); None when there are none."""
    total, seen = 0, False
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with path.open("rb") as handle:
                (size,) = struct.unpack("<Q", handle.read(8))
                if size > os.fstat(handle.fileno()).st_size - 8:  # not a safetensors file: never read "size" bytes
                    return None
                header = boundedjson.loads(handle.read(size))  # a TooDeep is a ValueError: not one
        except (OSError, ValueError, struct.error):
            return None
        if not isinstance(header, dict):
            return None
        for key, entry in header.items():
            if key != "__metadata__" and isinstance(entry, dict):
                total += math.prod(entry.get("shape", [])) or 0
                seen = True
    return total if seen else None


def check_memory(name: str, folder: Path, dtype: str, device: str, mode: str = "none") -> None:
    quantmode.choose(name, folder, mode, dtype, device, free_memory(device), Console(stderr=True))


def free_memory(device: str) -> int | None:
    from clovercode.engine import memory  # its free_bytes is the one seam (patched there in tests)

    return memory.free_bytes(device)


def model_info(name: str, model: Any, tokenizer: Any, device: str, dtype: str) -> ModelInfo:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    mask = getattr(config, "mask_token_id", None)
    if mask is None:
        mask = getattr(model.config, "mask_token_id", None)
    if mask is None:
        mask = getattr(tokenizer, "mask_token_id", None)
    block = next((getattr(config, k) for k in BLOCK_SIZE_KEYS if isinstance(getattr(config, k, None), int)), None)
    eos: set[int] = set()
    for source in (getattr(model.generation_config, "eos_token_id", None), config.eos_token_id, tokenizer.eos_token_id):
        eos.update([source] if isinstance(source, int) else (source or []))
    window = getattr(config, "max_position_embeddings", None) or getattr(tokenizer, "model_max_length", 4096)
    layer_types = getattr(config, "layer_types", None) or []
    sliding = any(t in ("sliding_attention", "chunked_attention", "hybrid_sliding") for t in layer_types) or (
        bool(getattr(config, "sliding_window", None)) and getattr(config, "use_sliding_window", True) is not False)
    return ModelInfo(name, mask, block, bool(getattr(config, "logit_shift", True)), frozenset(eos),
                     int(min(window, 1 << 20)), device, dtype, sliding)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

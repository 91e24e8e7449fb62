"""Engine knobs as one frozen dataclass, validated when it is built (bad values never reach torch)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from clovercode.ground.errors import ConfigError
from clovercode.trust.models import SETTING as TRUST_SETTING, parse_entries

STRATEGIES = ("threshold", "topk", "steps")
DTYPES = ("auto", "float32", "bfloat16", "float16", "float64")
COMPILE_MODES = ("off", "auto", "static")  # engine/graphs.py: static cache + CUDA graphs
QUANTIZATION_MODES = ("none", "int8", "int4", "fp8", "auto")  # engine/weightplan.py MODES


@dataclass(frozen=True)
class EngineConfig:
    """How the engine decodes. ``block_size`` 0 means "the model's own" (1 for autoregressive models)."""

    block_size: int = 0
    strategy: str = "threshold"  # threshold | topk | steps
    threshold: float = 0.9  # threshold: accept every masked position at least this confident
    top_k: int = 2  # topk: positions accepted per pass
    steps: int = 8  # steps: denoising passes per block
    temperature: float = 0.0  # 0 is greedy
    top_p: float = 1.0
    max_new_tokens: int = 4096
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16 | float64
    trust_remote_code: tuple[str, ...] = ()  # the models whose own code may run (clovercode/trust/models.py)
    logit_shift: bool | None = None  # None: the model's own (default True, as in AR-adapted models)
    mask_token_id: int | None = None  # None: the model's own
    compile: str = "off"  # off | auto (static cache + CUDA graphs on CUDA) | static (also eagerly on CPU)
    prompt_cache_tokens: int = 32768  # older prompts' caches kept for reuse, in prompt tokens (the last is always kept)
    max_context: int = 0  # most positions one request holds (0: the model's window); engine/memplan.py
    max_batch_tokens: int = 0  # KV positions of every batched slot together (0: what memory affords)
    memory_utilization: float = 0.9  # share of the device's free memory the plan may use
    quantization: str = "none"  # none | int8 | int4 | fp8 | auto (engine/quantize.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "trust_remote_code", parse_entries(self.trust_remote_code, TRUST_SETTING))
        problems = list(_problems(self))
        if problems:
            raise ConfigError("invalid engine settings: " + "; ".join(problems),
                              hint="See docs/engine.md (Knobs) for the allowed values.")

    def with_(self, **changes: Any) -> "EngineConfig":
        """A validated copy with ``changes`` applied."""
        return replace(self, **changes)


def _problems(c: EngineConfig):
    if not isinstance(c.block_size, int) or c.block_size < 0:
        yield f"engine.block_size must be a whole number ≥ 0 (0 = the model's own), got {c.block_size!r}"
    if c.strategy not in STRATEGIES:
        yield f"engine.strategy must be one of {', '.join(STRATEGIES)}, got {c.strategy!r}"
    if not 0.0 < c.threshold <= 1.0:
        yield f"engine.threshold must be in (0, 1], got {c.threshold!r}"
    if c.top_k < 1:
        yield f"engine.top_k must be ≥ 1, got {c.top_k!r}"
    if c.steps < 1:
        yield f"engine.steps must be ≥ 1, got {c.steps!r}"
    if c.temperature < 0:
        yield f"temperature must be ≥ 0, got {c.temperature!r}"
    if not 0.0 < c.top_p <= 1.0:
        yield f"top_p must be in (0, 1], got {c.top_p!r}"
    if c.max_new_tokens < 1:
        yield f"max_new_tokens must be ≥ 1, got {c.max_new_tokens!r}"
    if c.dtype not in DTYPES:
        yield f"engine.dtype must be one of {', '.join(DTYPES)}, got {c.dtype!r}"
    if not (c.device == "auto" or c.device in ("cpu", "mps", "cuda") or c.device.startswith("cuda:")):
        yield f"engine.device must be auto, cpu, cuda, cuda:N or mps, got {c.device!r}"
    if c.compile not in COMPILE_MODES:
        yield f"engine.compile must be one of {', '.join(COMPILE_MODES)}, got {c.compile!r}"
    if not isinstance(c.prompt_cache_tokens, int) or c.prompt_cache_tokens < 0:
        yield f"engine.prompt_cache_tokens must be a whole number ≥ 0, got {c.prompt_cache_tokens!r}"
    for key in ("max_context", "max_batch_tokens"):
        value = getattr(c, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            yield f"engine.{key} must be a whole number ≥ 0 (0 = planned from memory), got {value!r}"
    if isinstance(c.max_context, int) and isinstance(c.max_batch_tokens, int) and 0 < c.max_batch_tokens < c.max_context:
        yield (f"engine.max_batch_tokens ({c.max_batch_tokens}) must hold at least one request of engine.max_context "
               f"({c.max_context}) tokens")
    if not isinstance(c.memory_utilization, (int, float)) or not 0.0 < c.memory_utilization <= 1.0:
        yield f"engine.memory_utilization must be in (0, 1], got {c.memory_utilization!r}"
    if c.quantization not in QUANTIZATION_MODES:
        yield f"engine.quantization must be one of {', '.join(QUANTIZATION_MODES)}, got {c.quantization!r}"
    if c.mask_token_id is not None and c.mask_token_id < 0:
        yield f"engine.mask_token_id must be ≥ 0, got {c.mask_token_id!r}"


def engine_config_from(cfg: Any) -> EngineConfig:
    """The engine config from the layered settings (``engine.*`` keys plus sampling keys)."""
    mask = cfg["engine.mask_token_id"]
    return EngineConfig(
        block_size=cfg["engine.block_size"], strategy=cfg["engine.strategy"], threshold=cfg["engine.threshold"],
        top_k=cfg["engine.top_k"], steps=cfg["engine.steps"], temperature=cfg["temperature"], top_p=cfg["top_p"],
        max_new_tokens=cfg["max_new_tokens"], device=cfg["engine.device"], dtype=cfg["engine.dtype"],
        trust_remote_code=cfg["engine.trust_remote_code"], mask_token_id=mask if mask >= 0 else None,
        compile=cfg["engine.compile"], prompt_cache_tokens=cfg["engine.prompt_cache_tokens"],
        max_context=cfg["engine.max_context"], max_batch_tokens=cfg["engine.max_batch_tokens"],
        memory_utilization=cfg["engine.memory_utilization"], quantization=cfg["engine.quantization"])

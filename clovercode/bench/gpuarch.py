"""Random-weight models for the GPU check: Clover's published architecture, and a small model for the
exactness checks. Nothing is downloaded: the configs are built in code with transformers' own
Qwen3.5-MoE config class.

Clover-35B-A3B is a block-diffusion fine-tune of Qwen3.6-35B-A3B, so its text model has that
architecture. The sizes (engine/data/clover-35b-a3b.json) are the Qwen3.6-35B-A3B text config as
published with the weights (hidden 2048; 40 layers, every fourth full attention and the rest Gated DeltaNet; 16 query / 2 KV
heads of 256; linear attention 16 key / 32 value heads of 128, conv kernel 4; 256 experts of 512,
8 routed per token, one shared expert of 512; vocabulary 248,320; 262,144 positions). They were read
from a public training recipe that mirrors that config (THUDM/slime, scripts/models/qwen3.5-35B-A3B.sh,
which qwen36-35B-A3B.sh reuses as "the same topology"), and they are also transformers'
Qwen3_5MoeTextConfig defaults. Not taken from the real config, so guessed or left at transformers'
defaults: the rope settings (partial rotary, theta), which only change values, not cost, and
``mask_token_id`` (the vocabulary's last id here; Clover's own is in its config).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from clovercode.engine.memplan import clover_config

# Read from the config shipped with the package (engine/data/clover-35b-a3b.json): the memory plan
# (engine/memplan.py) and the check's random model use the same figures.
_SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
              "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
              "linear_conv_kernel_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
              "shared_expert_intermediate_size", "vocab_size", "max_position_embeddings")
CLOVER_SIZES: dict[str, Any] = {key: clover_config()["text_config"][key] for key in _SIZE_KEYS}
FULL_ATTENTION_EVERY = 4
# The dry run's stand-in: the same layer kinds and code paths, sizes a 2-core CPU runs in seconds.
TINY_SIZES: dict[str, Any] = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32, "vocab_size": 512, "max_position_embeddings": 65536,
}
# The exactness model: small enough for fp32 recomputation, peaky enough that greedy choices are clear.
EXACT_SIZES: dict[str, Any] = {**TINY_SIZES, "hidden_size": 128, "num_hidden_layers": 4, "vocab_size": 256}


def layer_types(layers: int) -> list[str]:
    """Clover's pattern (three Gated DeltaNet layers, then full attention); never without a full layer."""
    kinds = ["full_attention" if (i + 1) % FULL_ATTENTION_EVERY == 0 else "linear_attention" for i in range(layers)]
    if "full_attention" not in kinds:
        kinds[-1] = "full_attention"
    return kinds


def text_config(sizes: dict[str, Any], layers: int | None = None, experts: str | None = None) -> Any:
    """``experts``: transformers' experts implementation (None: its default, grouped GEMMs)."""
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig

    values = dict(sizes)
    if layers is not None:
        values["num_hidden_layers"] = layers
    vocab = values["vocab_size"]
    config = Qwen3_5MoeTextConfig(**values, layer_types=layer_types(values["num_hidden_layers"]),
                                  eos_token_id=vocab - 2, bos_token_id=1, pad_token_id=0)
    config.mask_token_id = vocab - 1
    config._attn_implementation = "sdpa"
    if experts is not None:
        config._experts_implementation = experts
    return config


@contextlib.contextmanager
def _building(device: str, dtype: Any) -> Iterator[None]:
    """Parameters are made on ``device`` in ``dtype`` directly: a 35B model never exists in host RAM."""
    import torch

    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(before)


def random_model(config: Any, device: str, dtype: Any, seed: int = 0, head_scale: float = 1.0) -> Any:
    """A Qwen3.5-MoE causal LM with random weights; ``head_scale`` sharpens its output distribution."""
    import torch
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeForCausalLM

    torch.manual_seed(seed)
    with _building(device, dtype), torch.no_grad():
        model = Qwen3_5MoeForCausalLM(config)
        if head_scale != 1.0:
            model.lm_head.weight.mul_(head_scale)
    return model.eval()


def parameter_counts(config: Any) -> dict[str, float]:
    """Total and active (per token) parameters of the full architecture, in billions, from the sizes."""
    c = config
    attn = c.hidden_size * c.head_dim * (2 * c.num_attention_heads + 2 * c.num_key_value_heads) \
        + c.num_attention_heads * c.head_dim * c.hidden_size
    key_dim, value_dim = c.linear_num_key_heads * c.linear_key_head_dim, c.linear_num_value_heads * c.linear_value_head_dim
    linear = c.hidden_size * (2 * key_dim + 2 * value_dim + 2 * c.linear_num_value_heads) + value_dim * c.hidden_size
    expert = 3 * c.hidden_size * c.moe_intermediate_size
    shared = 3 * c.hidden_size * c.shared_expert_intermediate_size + c.hidden_size * (c.num_experts + 1)
    kinds = c.layer_types[:c.num_hidden_layers]
    mixers = sum(attn if k == "full_attention" else linear for k in kinds)
    embeddings = 2 * c.vocab_size * c.hidden_size
    total = mixers + len(kinds) * (c.num_experts * expert + shared) + embeddings
    active = mixers + len(kinds) * (c.num_experts_per_tok * expert + shared) + embeddings
    return {"total_b": float(f"{total / 1e9:.4g}"), "active_b": float(f"{active / 1e9:.4g}")}


def fast_kernels() -> dict[str, Any]:
    """Whether transformers' Gated DeltaNet and causal-conv paths use flash-linear-attention and
    causal-conv1d (installed through the ``gpu`` extra) or their PyTorch fallbacks."""
    import importlib

    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as modeling

    found: dict[str, Any] = {}
    for package in ("fla", "causal_conv1d"):
        try:
            module = importlib.import_module(package)
            found[package] = getattr(module, "__version__", "installed")
        except Exception as exc:  # a broken build is as good as none, and worth saying
            found[package] = None if isinstance(exc, ImportError) else f"broken: {type(exc).__name__}"
    uses = {}
    for name in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
                 "causal_conv1d_update"):
        function = getattr(modeling, name, None)
        uses[name] = _implementation(function) if function is not None else "absent"
    found["in_use"] = uses
    return found


def _implementation(function: Any) -> str:
    """The module the wrapped function dispatches to (transformers wraps the chosen one in a closure)."""
    for cell in getattr(function, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:
            continue
        module = getattr(inner, "__module__", "") or ""
        if callable(inner) and module.split(".")[0] in ("fla", "causal_conv1d"):
            return module
    return "torch fallback"

"""A config with a ``model_type`` of its own whose fields are those of a transformers architecture.

A block-diffusion fine-tune such as Clover publishes its own ``model_type`` (``"clover"``) and an
``auto_map`` to its code, while every architecture field is Qwen3.5-MoE's (Gated DeltaNet and full
attention layers, routed experts). Run through its own code, every fast path of the engine was
skipped (its cache is no transformers cache: no index-written keys, no static cache or graphs, no slot
batching). Mapped onto transformers' own classes, all of them apply, and no code from the model runs.

The mapping is strict, because transformers' class will compute what *it* computes with the weights:

* every field an architecture needs is present (``SIGNATURES``), and ``layer_types`` names only the
  layer kinds the class has;
* every other key is a field of transformers' config class, an argument its constructor takes, a
  key its published configs carry for older releases (``LEGACY``), the engine's own diffusion
  metadata (mask token, block size, logit shift), bookkeeping (``auto_map``, ``architectures``…), or a
  ``quantization_config`` (checked by engine/prequant.py before anything loads).
  Any other key may be a switch the model's code reads, so the model is not mapped and the reason
  names the key;
* after loading, every weight must fit the class exactly (``loading._check_native_fit``).

A config may be flat (the text model: ``qwen3_5_moe_text``) or nest it under ``text_config`` beside a
vision config (``qwen3_5_moe``, whose causal-LM class is the same text model, its weights' prefix
mapped by transformers).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

# The fields that identify an architecture (beyond what every decoder has).
SIGNATURES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # model_type: (required fields, allowed layer_types)
    "qwen3_5_moe_text": (frozenset({
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
        "layer_types", "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
        "linear_num_key_heads", "linear_num_value_heads", "num_experts", "num_experts_per_tok",
        "moe_intermediate_size", "shared_expert_intermediate_size"}),
        frozenset({"full_attention", "linear_attention"})),
}
NESTED = {"qwen3_5_moe_text": "qwen3_5_moe"}  # the model_type whose text_config is this architecture
DIFFUSION = frozenset({"mask_token_id", "block_size", "bd_size", "block_length", "diffusion_block_size", "logit_shift"})
BOOKKEEPING = frozenset({"auto_map", "architectures", "model_type", "transformers_version", "torch_dtype", "dtype",
                         "_name_or_path", "text_config", "vision_config"})
# Data transformers' quantizers read, not a switch of the model's code: engine/prequant.py allows the
# methods that load here and refuses every other by name (a pre-quantized Clover maps as any other).
QUANTIZATION = frozenset({"quantization_config"})
# Keys Qwen's published configs carry that transformers 5 reads elsewhere or ignores.
LEGACY = frozenset({"rope_theta", "rope_scaling", "partial_rotary_factor", "full_attention_interval",
                    "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings", "norm_topk_prob", "decoder_sparse_step",
                    "mlp_only_layers", "attn_output_gate", "use_sliding_window", "sliding_window",
                    "max_window_layers", "tie_word_embeddings", "pad_token_id", "bos_token_id", "eos_token_id"})


@dataclass(frozen=True)
class Mapping:
    model_type: str | None  # the transformers model_type it maps onto; None: it does not
    why: str  # what matched, or which field decided against it


def map_config(config: dict[str, Any]) -> Mapping:
    """Which transformers architecture ``config`` (a config.json object with an unknown model_type) is."""
    reasons = []
    for model_type, (required, kinds) in SIGNATURES.items():
        nested = isinstance(config.get("text_config"), dict)
        text = config["text_config"] if nested else config
        missing = sorted(required - set(text))
        if missing:
            reasons.append(f"not {model_type}: no {', '.join(missing[:3])}{' …' if len(missing) > 3 else ''}")
            continue
        layer_types = text.get("layer_types")
        if not isinstance(layer_types, list) or not set(layer_types) <= kinds:
            reasons.append(f"not {model_type}: layer_types {sorted(set(map(str, layer_types or [])))} are not "
                           f"{sorted(kinds)}")
            continue
        target = NESTED[model_type] if nested else model_type
        unknown = sorted(set(text) - _known(model_type))
        if nested:
            unknown += [f"(outer) {key}" for key in sorted(set(config) - _known(target))]
        if unknown:
            reasons.append(f"{model_type}'s fields, but also {', '.join(unknown[:4])}{' …' if len(unknown) > 4 else ''}, "
                           "which transformers' class does not read (the model's code may)")
            continue
        return Mapping(target, f"its fields are {model_type}'s")
    return Mapping(None, "; ".join(reasons) or "no architecture to compare")


def native_config(config: dict[str, Any], model_type: str) -> Any:
    """transformers' config object for ``config`` read as ``model_type``: the diffusion metadata stays
    (as attributes, where ``loading.model_info`` reads it), the ``auto_map`` goes."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    data = {key: value for key, value in config.items() if key not in ("auto_map", "model_type", "architectures")}
    data["architectures"] = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]]
    return CONFIG_MAPPING[model_type].from_dict(data)


def _known(model_type: str) -> frozenset[str]:
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    fields = set(cls().to_dict())
    fields.update(name for name in inspect.signature(cls.__init__).parameters if name not in ("self", "kwargs"))
    return frozenset(fields) | DIFFUSION | BOOKKEEPING | LEGACY | QUANTIZATION

"""A stand-in for a model that ships its own code (trust_remote_code): an older-style forward that
takes ``past_key_values`` and keeps its cache as plain per-layer lists grown by ``torch.cat``."""

from dataclasses import dataclass
from typing import Any

from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM


class TinyRemoteConfig(LlamaConfig):
    model_type = "tinyremote"


class LegacyCache:
    def __init__(self):
        self.key_cache: list = []
        self.value_cache: list = []
        self.seen_tokens = 0


@dataclass
class TinyRemoteOutput:  # a plain class: transformers' ModelOutput would rename past_key_values
    logits: Any = None
    past_key_values: Any = None


class TinyRemoteForCausalLM(LlamaForCausalLM):
    config_class = TinyRemoteConfig

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False,
                **kwargs):
        inner = None
        if use_cache:
            inner = DynamicCache()
            if past_key_values is not None:
                for index, (keys, values) in enumerate(zip(past_key_values.key_cache, past_key_values.value_cache)):
                    inner.update(keys, values, index)
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              cache=inner, use_cache=use_cache)
        legacy = past_key_values
        if use_cache:
            legacy = legacy if legacy is not None else LegacyCache()
            legacy.key_cache = [layer.keys for layer in inner.layers]
            legacy.value_cache = [layer.values for layer in inner.layers]
            legacy.seen_tokens += input_ids.shape[1]
        return TinyRemoteOutput(logits=out.logits, past_key_values=legacy)

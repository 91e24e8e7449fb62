"""A KV cache layer written by index into a preallocated buffer (imported lazily: it needs transformers).

transformers' ``DynamicLayer`` appends with ``torch.cat``, copying the whole prefix on every forward:
O(prompt) memory traffic per pass. ``BufferedLayer`` keeps spare capacity and exposes
``keys``/``values`` as views of the used part, so a pass writes only its own rows. Spare capacity
comes in whole chunks (engine/memplan.py ``CHUNK_TOKENS``): a full buffer is replaced by one
just large enough for what is needed, rounded up to a chunk, never by one twice its size (a 128K
prompt would otherwise double to 256K positions, with both alive during the copy). The rows
past the committed length are scratch: a denoising pass writes its block there, restoring the
snapshot shrinks the views back, and the next write overwrites them. Committed rows are never
written twice, so the views a snapshot keeps stay valid and bit-identical.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from clovercode.engine.memplan import CHUNK_TOKENS, round_up


class BufferedLayer(DynamicLayer):
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        used = self.get_seq_length()
        needed = used + key_states.shape[-2]
        if self._key_buffer is None or needed > self._key_buffer.shape[-2]:
            capacity = round_up(needed, CHUNK_TOKENS)
            self._key_buffer = _grown(self.keys, key_states, used, capacity)
            self._value_buffer = _grown(self.values, value_states, used, capacity)
        self._key_buffer[..., used:needed, :].copy_(key_states)
        self._value_buffer[..., used:needed, :].copy_(value_states)
        self.keys = self._key_buffer[..., :needed, :]
        self.values = self._value_buffer[..., :needed, :]
        return self.keys, self.values


def _grown(current: torch.Tensor, new: torch.Tensor, used: int, capacity: int) -> torch.Tensor:
    shape = (*new.shape[:-2], capacity, new.shape[-1])
    buffer = torch.empty(shape, dtype=new.dtype, device=new.device)
    if used:
        buffer[..., :used, :].copy_(current[..., :used, :])
    return buffer


def buffered_cache(config: Any) -> DynamicCache:
    """A DynamicCache for ``config`` whose full-attention layers are BufferedLayers (others untouched)."""
    cache = DynamicCache(config=config)
    if not cache.layers:  # no layer types known yet: build them for every decoder layer
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        cache.layers = [BufferedLayer() for _ in range(text.num_hidden_layers)]
        cache.layer_class_to_replicate = None
    cache.layers = [BufferedLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache

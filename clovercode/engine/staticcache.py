"""A fixed-shape cache for replayable passes (imported lazily: it needs transformers).

A CUDA graph replays the same kernels on the same addresses, so a pass may not change any tensor's
shape or storage. ``kvbuffer.BufferedLayer`` exposes the used rows as views whose length grows with
every commit; ``StaticKVLayer`` instead exposes the whole preallocated buffer (rows R, heads,
capacity, dim) and writes the pass's rows at the positions held in a shared device tensor
(``Slots.index``). Rows past the committed length hold scratch or zeros: the additive mask of every
pass hides them, so attention over the full capacity equals attention over the used rows.

Linear-attention layers (Gated DeltaNet) already keep fixed-shape conv and recurrent states that
transformers updates in place; they are copied as they are. Anything else (remote code, sliding
windows, layers that are both) is refused with ``Unsupported``: the caller stays on the dynamic path.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, LinearAttentionCacheLayerMixin


class Unsupported(Exception):
    """The model's cache has a layer the static cache cannot hold."""


@dataclass
class Slots:
    """Where the current pass writes its keys and values ((q,) long on the device), and how many
    positions it attends over (None: the whole capacity)."""

    index: Any = None
    span: int | None = None


class StaticKVLayer(DynamicLayer):
    """A full-attention layer over a fixed buffer; ``length`` is the committed length (host int)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, slots: Slots):
        super().__init__()
        self.dtype, self.device = keys.dtype, keys.device
        self.keys, self.values = keys, values
        self.slots = slots
        self.length = 0
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        self.keys.index_copy_(2, self.slots.index, key_states.to(self.keys.dtype))
        self.values.index_copy_(2, self.slots.index, value_states.to(self.values.dtype))
        span = self.slots.span
        if span is None:
            return self.keys, self.values
        return self.keys[:, :, :span], self.values[:, :, :span]  # views: fixed addresses for a graph

    def get_seq_length(self, *args: Any, **kwargs: Any) -> int:
        return self.length

    def get_max_cache_shape(self, *args: Any, **kwargs: Any) -> int:
        return int(self.keys.shape[-2])


@dataclass
class StaticKV:
    """The static cache (a DynamicCache whose attention layers are StaticKVLayers) and its shape."""

    cache: DynamicCache
    rows: int
    capacity: int
    slots: Slots = field(default_factory=Slots)

    def attention_layers(self) -> list[StaticKVLayer]:
        return [layer for layer in self.cache.layers if isinstance(layer, StaticKVLayer)]

    def set_length(self, length: int) -> None:
        for layer in self.attention_layers():
            layer.length = length

    def fits(self, source: DynamicCache, rows: int, length: int) -> bool:
        return rows == self.rows and length <= self.capacity and len(source.layers) == len(self.cache.layers)

    def load(self, source: DynamicCache, length: int) -> None:
        """Copy ``source`` (a batch-1 prefilled cache of ``length`` tokens) into every row, in place:
        the addresses a captured graph reads stay the same."""
        for mine, theirs in zip(self.cache.layers, source.layers):
            if isinstance(mine, StaticKVLayer):
                mine.keys[:, :, :length].copy_(theirs.keys[..., :length, :].expand(self.rows, -1, -1, -1))
                mine.values[:, :, :length].copy_(theirs.values[..., :length, :].expand(self.rows, -1, -1, -1))
                mine.length = length
            else:
                _load_linear(mine, theirs, self.rows)


def build(source: DynamicCache, rows: int, capacity: int) -> StaticKV:
    """A static cache shaped after ``source`` (already prefilled) with ``rows`` rows and room for
    ``capacity`` tokens, holding ``source``'s state in every row. Raises Unsupported."""
    layers = getattr(source, "layers", None)
    if not isinstance(source, DynamicCache) or not isinstance(layers, list) or not layers:
        raise Unsupported(f"cache class {type(source).__name__}")
    static = copy.copy(source)  # the container's own attributes (layer types, offloading flags) as they are
    slots = Slots()
    new_layers: list[Any] = []
    for layer in layers:
        is_linear = isinstance(layer, LinearAttentionCacheLayerMixin)
        if is_linear and not isinstance(layer, DynamicLayer):
            new_layers.append(_linear_copy(layer, rows))
        elif isinstance(layer, DynamicLayer) and not is_linear and not getattr(layer, "is_sliding", False):
            if not getattr(layer, "is_initialized", False):
                raise Unsupported("an attention layer the prefill did not fill")
            shape = (rows, layer.keys.shape[1], capacity, layer.keys.shape[-1])
            vshape = (rows, layer.values.shape[1], capacity, layer.values.shape[-1])
            new_layers.append(StaticKVLayer(torch.zeros(shape, dtype=layer.keys.dtype, device=layer.keys.device),
                                            torch.zeros(vshape, dtype=layer.values.dtype, device=layer.values.device),
                                            slots))
        else:
            raise Unsupported(f"cache layer {type(layer).__name__}")
    static.layers = new_layers
    kv = StaticKV(static, rows, capacity, slots)
    kv.load(source, _length(source))
    return kv


def _length(source: DynamicCache) -> int:
    """Committed tokens: a static layer says so, a dynamic layer's keys are exactly that long."""
    for layer in source.layers:
        if isinstance(layer, StaticKVLayer):
            return layer.length
        if isinstance(layer, DynamicLayer) and not isinstance(layer, LinearAttentionCacheLayerMixin):
            return int(layer.keys.shape[-2])
    return 0


def _linear_copy(layer: Any, rows: int) -> Any:
    """A deep copy with every state tensor widened to ``rows`` rows (batch-1 state repeated)."""
    twin = copy.deepcopy(layer)
    for name in ("conv_states", "recurrent_states"):
        states = getattr(twin, name)
        for index, tensor in list(states.items()):
            if tensor is not None:
                states[index] = tensor.expand(rows, *tensor.shape[1:]).clone()
    return twin


def _load_linear(mine: Any, theirs: Any, rows: int) -> None:
    for name in ("conv_states", "recurrent_states"):
        live, source = getattr(mine, name), getattr(theirs, name)
        for index, tensor in source.items():
            target = live.get(index)
            if tensor is None:
                live[index] = None
            elif target is not None and target.shape[1:] == tensor.shape[1:]:
                target.copy_(tensor.expand(rows, *tensor.shape[1:]))
            else:
                live[index] = tensor.expand(rows, *tensor.shape[1:]).clone()
    for name in ("has_previous_state", "is_conv_states_initialized", "is_recurrent_states_initialized",
                 "conv_kernel_size"):
        if hasattr(theirs, name):
            setattr(mine, name, dict(getattr(theirs, name)))

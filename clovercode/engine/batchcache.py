"""The slot cache: the committed state of up to ``capacity`` sequences in preallocated batch buffers
(imported lazily: it needs transformers).

Layout (docs/engine.md, "Batched decoding: the slot cache"):
* an attention layer keeps keys and values as ``(capacity, kv_heads, T, head_dim)``; sequence s lives in
  row ``phys[s]`` at time positions ``0 .. length(s)-1``. Positions past a row's length are scratch: a
  pass writes its block there (at the row's OWN offset), a denoising pass's block is simply forgotten and
  the next pass overwrites it. ``T`` grows by whole chunks (``CHUNK``) when a row would run past it,
  never by doubling, and never past ``limit`` (the memory plan's slot tokens, engine/memplan.py): a
  row that would is refused with ``CacheFull`` before anything is allocated.
* a linear-attention layer (Gated DeltaNet) keeps its conv and recurrent states stacked per row,
  ``(capacity, ...)``: O(1) in the sequence length.
* live sequences always occupy rows ``0 .. n-1`` (releasing one moves the last row into the hole), so a
  forward over every live sequence reads the buffers as views, without gathering the prefix.

``Step`` describes one forward (which rows, where each block goes, which rows commit); ``StepCache`` is
the transformers ``Cache`` the model sees during it; ``SlotCache.settle`` keeps what committing rows
wrote into their linear-attention state and advances their lengths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicLayer, DynamicSlidingWindowLayer, LinearAttentionLayer

from clovercode.engine.memplan import CHUNK_TOKENS, CacheFull, round_up  # CacheFull: re-exported

CHUNK = CHUNK_TOKENS  # positions the time axis grows by (read when a SlotCache is made)


class UnsupportedCache(ValueError):
    """The model's cache has a layer kind the slot cache cannot batch (sliding window, remote code...)."""


@dataclass
class Step:
    """One forward over R rows of blocks of L tokens. Tensors live on the model's device."""

    phys: Any  # (R,) long: each row's buffer row, in forward order
    lengths: Any  # (R,) long: each row's committed length (where its block is written)
    positions: Any  # (R, L) long: each block token's position, lengths[r] + j (also its time in the buffer)
    commit: Any  # (R,) bool
    window: tuple[int, int] | None  # (lo, R) when phys == lo..lo+R-1: the buffers are read as views
    kv_len: int  # max(length) + L: keys the attention reads (shorter rows are masked past their block)
    block: int  # L
    commit_rows: Any  # (C,) long: forward rows that commit


def _write_offsets(step: Step) -> Any:
    """(R, L): where each block token goes in its row's buffer: at its own position, so no holes."""
    return step.positions


class SlotKV(CacheLayerMixin):
    """An attention layer's view of the slot buffers during one forward."""

    is_sliding = False
    is_compileable = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.buffers = [keys, values]  # (capacity, H, T, D) each
        self.step: Step | None = None
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        step = self.step
        assert step is not None, "the slot cache is only valid inside a forward"
        rows, times = step.phys[:, None], _write_offsets(step)
        out = []
        for buffer, new in zip(self.buffers, (key_states, value_states)):
            # (R, H, L, D) → (R, L, H, D): advanced indices on dims 0 and 2 put (R, L) first
            buffer[rows, :, times] = new.transpose(1, 2).to(buffer.dtype)
            if step.window is not None:
                lo, count = step.window
                out.append(buffer[lo:lo + count, :, :step.kv_len])
            else:
                out.append(buffer[:, :, :step.kv_len].index_select(0, step.phys))
        self.keys, self.values = out
        return out[0], out[1]

    def get_seq_length(self) -> int:
        return 0 if self.step is None else self.step.kv_len

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length(), 0

    def get_max_length(self) -> int:
        return -1


class StepCache(Cache):
    """The ``Cache`` a batched forward runs against: slot views for attention, gathered linear states."""

    def __init__(self, layers: list[Any]):
        super().__init__(layers=layers)


@dataclass
class LinearSlots:
    conv: torch.Tensor  # (capacity, channels, kernel)
    recurrent: torch.Tensor  # (capacity, heads, key_dim, value_dim)
    kernel: int


class SlotCache:
    """Per-layer batch buffers for ``capacity`` sequences; the layout is read from the first prefill."""

    def __init__(self, capacity: int, limit: int | None = None):
        """``limit``: the most positions a slot may hold (None: unbounded, for tests and tools)."""
        if capacity < 1:
            raise ValueError(f"a slot cache needs at least one slot, not {capacity}")
        self.capacity = capacity
        self.chunk = CHUNK
        self.limit = None if limit is None else round_up(limit, self.chunk)
        self.layers: list[SlotKV | LinearSlots] | None = None
        self.time = 0
        self.phys: dict[int, int] = {}  # slot → buffer row
        self.slot_at: list[int] = []  # buffer row → slot (rows 0 .. n-1 are live)
        self.lengths: dict[int, int] = {}  # slot → committed tokens

    # -- admission and release -------------------------------------------------------------------
    def prepare(self, cache: Any, length: int) -> None:
        """Allocate the buffers in the layout of a batch-1 prefilled cache (raises ``UnsupportedCache``)."""
        units = getattr(cache, "layers", None)
        if not isinstance(units, list) or not units:
            raise UnsupportedCache(f"the model's cache ({type(cache).__name__}) has no layers to batch")
        self.layers = [self._allocate(unit, length) for unit in units]

    def admit(self, slot: int, cache: Any, length: int) -> None:
        """Copy a batch-1 prefilled transformers cache into a free slot's row."""
        if self.layers is None:
            self.prepare(cache, length)
        units = getattr(cache, "layers", None)
        if not isinstance(units, list) or len(units) != len(self.layers or []):
            raise UnsupportedCache("the model's cache changed its number of layers")
        self.reserve(length)
        row = len(self.slot_at)
        for unit, layer in zip(units, self.layers):
            if isinstance(layer, SlotKV):
                for buffer, part in zip(layer.buffers, (unit.keys, unit.values)):
                    buffer[row, :, :length].copy_(part[0, :, :length])
            else:
                layer.conv[row].copy_(unit.conv_states[0][0])
                layer.recurrent[row].copy_(unit.recurrent_states[0][0])
        self.phys[slot] = row
        self.slot_at.append(slot)
        self.lengths[slot] = length

    def open(self, slot: int, length: int) -> None:
        """Give a free slot the next buffer row, empty: a batched prefill writes its keys and values
        there (attention layers only: a linear layer's state would need the prompt run alone)."""
        if self.has_linear:
            raise UnsupportedCache("a slot with linear-attention state is filled by a batch-1 prefill")
        self.reserve(length)
        self.phys[slot] = len(self.slot_at)
        self.slot_at.append(slot)
        self.lengths[slot] = 0

    def share(self, source: int, targets: list[int], length: int) -> None:
        """Copy the first ``length`` committed positions of ``source``'s keys and values into ``targets``
        (a slice copy per row: no gather of the source, no scatter, which each admission paid)."""
        row = self.phys[source]
        for layer in self.layers or []:
            if isinstance(layer, SlotKV):
                for buffer in layer.buffers:
                    for slot in targets:
                        buffer[self.phys[slot], :, :length].copy_(buffer[row, :, :length])
        for slot in targets:
            self.lengths[slot] = length

    def export(self, slot: int, length: int, cache: Any) -> Any:
        """Write the first ``length`` positions of ``slot``'s keys and values into an empty batch-1
        ``cache`` (attention layers only, like ``open``) and return it: a prompt prefilled in a batch
        becomes a checkpoint a later turn can extend."""
        if self.has_linear:
            raise UnsupportedCache("a slot with linear-attention state keeps no state at its prompt's end")
        row = self.phys[slot]
        for index, layer in enumerate(self.layers or []):
            keys, values = layer.buffers  # type: ignore[union-attr]
            cache.update(keys[row:row + 1, :, :length], values[row:row + 1, :, :length], index)  # copied in
        return cache

    @property
    def has_linear(self) -> bool:
        return any(isinstance(layer, LinearSlots) for layer in self.layers or [])

    def release(self, slot: int) -> None:
        row = self.phys.pop(slot, None)
        if row is None:
            return
        del self.lengths[slot]
        last = len(self.slot_at) - 1
        if row != last:  # keep live rows dense: the last row moves into the hole (one row's copy)
            moved = self.slot_at[last]
            self._copy_row(last, row, self.lengths[moved])
            self.slot_at[row] = moved
            self.phys[moved] = row
        self.slot_at.pop()

    def _copy_row(self, source: int, target: int, length: int) -> None:
        for layer in self.layers or []:
            if isinstance(layer, SlotKV):
                for buffer in layer.buffers:
                    buffer[target, :, :length].copy_(buffer[source, :, :length])
            else:
                layer.conv[target].copy_(layer.conv[source])
                layer.recurrent[target].copy_(layer.recurrent[source])

    def _allocate(self, unit: Any, length: int) -> SlotKV | LinearSlots:
        kind = type(unit)
        if isinstance(unit, LinearAttentionLayer) and not isinstance(unit, DynamicLayer):
            if unit.number_of_states != 1 or unit.record_past:
                raise UnsupportedCache(f"linear-attention layer {kind.__name__} keeps several states")
            conv, recurrent = unit.conv_states[0], unit.recurrent_states[0]
            return LinearSlots(conv.new_zeros((self.capacity, *conv.shape[1:])),
                               recurrent.new_zeros((self.capacity, *recurrent.shape[1:])), int(unit.conv_kernel_size[0]))
        if isinstance(unit, DynamicLayer) and not isinstance(unit, (DynamicSlidingWindowLayer, LinearAttentionLayer)):
            self._check(length)
            self.time = max(self.time, round_up(max(length, 1), self.chunk))
            keys, values = unit.keys, unit.values
            return SlotKV(keys.new_zeros((self.capacity, keys.shape[1], self.time, keys.shape[3])),
                          values.new_zeros((self.capacity, values.shape[1], self.time, values.shape[3])))
        raise UnsupportedCache(f"cache layer {kind.__name__} cannot be batched (full attention and "
                               "Gated-DeltaNet layers can)")

    def _check(self, needed: int) -> None:
        if self.limit is not None and needed > self.limit:
            raise CacheFull(f"a sequence of {needed:,} positions does not fit a slot of {self.limit:,} "
                            "(the memory plan's slot tokens, engine.max_context)")

    def reserve(self, needed: int) -> None:
        """Grow every attention buffer's time axis to hold ``needed`` positions: to the next whole
        chunk, one layer at a time (only that layer's old buffers live beside its new ones)."""
        if needed <= self.time or self.layers is None:
            return
        self._check(needed)
        time = round_up(needed, self.chunk)
        for layer in self.layers:
            if isinstance(layer, SlotKV):
                grown = []
                for buffer in layer.buffers:
                    # zeros, not empty: masked scratch still enters q·k, and garbage could be NaN
                    bigger = buffer.new_zeros((*buffer.shape[:2], time, buffer.shape[3]))
                    bigger[:, :, :self.time].copy_(buffer)
                    grown.append(bigger)
                layer.buffers = grown
        self.time = time

    # -- one forward ------------------------------------------------------------------------------
    def step_cache(self, step: Step) -> StepCache:
        """The cache for one forward: attention layers write into the slot buffers at each row's offset;
        linear layers get a copy of the rows' states to advance (so a failed forward changes nothing)."""
        self.reserve(step.kv_len)
        units: list[Any] = []
        for layer in self.layers or []:
            if isinstance(layer, SlotKV):
                layer.step = step
                units.append(layer)
            else:
                units.append(_linear_unit(layer, step))
        return StepCache(units)

    def settle(self, cache: StepCache, step: Step, keep: bool = True) -> None:
        """End the step; with ``keep``, the committing rows' new linear states replace their slots' (the
        denoising rows' copies are dropped). Lengths are the caller's to advance."""
        for layer, unit in zip(self.layers or [], cache.layers):
            if isinstance(layer, SlotKV):
                layer.step = None
                layer.keys = layer.values = None
            elif keep and step.commit_rows.numel():
                targets = step.phys.index_select(0, step.commit_rows)
                layer.conv.index_copy_(0, targets, unit.conv_states[0].index_select(0, step.commit_rows))
                layer.recurrent.index_copy_(0, targets, unit.recurrent_states[0].index_select(0, step.commit_rows))


def _linear_unit(layer: LinearSlots, step: Step) -> LinearAttentionLayer:
    unit = LinearAttentionLayer()
    conv, recurrent = layer.conv.index_select(0, step.phys), layer.recurrent.index_select(0, step.phys)
    unit.conv_states[0], unit.recurrent_states[0] = conv, recurrent
    unit.conv_kernel_size[0] = layer.kernel
    unit.is_conv_states_initialized[0] = unit.is_recurrent_states_initialized[0] = True
    unit.has_previous_state[0] = True  # the block continues the committed state, never a fresh prefill
    unit.device, unit.dtype = conv.device, conv.dtype
    return unit

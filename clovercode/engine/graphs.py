"""Denoise and commit passes over a static cache, replayed as CUDA graphs on CUDA.

A pass in eager mode launches thousands of small kernels from Python (about 6,300 operations per
forward for Clover's layer layout), so on a GPU the host, not the GPU, sets the pace. A CUDA graph
records one pass's kernels once and replays them with one launch. That needs fixed shapes and
addresses: ``staticcache`` gives the cache that, and every pass of a kind (denoise or commit) and
length reads its inputs from the same buffers: token ids, positions, the additive mask over the
span it attends (the filled part rounded up to a power of two, at most the capacity: one graph per
span), and the rows the keys and values go to. The mask makes the fixed shapes exact:
denoising rows see every committed position and their whole block, committing rows see the committed
positions and their block causally, and nobody sees the rows past that.

``StaticPasses`` runs such passes for R rows that share one committed length (the GPU check measures
batches this way); ``StaticDenoiser`` is the engine's batch-1 ``Denoiser`` on top of it. Prefill
stays on ``CachedDenoiser`` (variable length, once per turn, with its prompt reuse) and its cache is
copied into the static one. Without CUDA (``graphs=False``) the same static passes run eagerly:
that is what the CPU tests check against ``CachedDenoiser``. If capturing fails (a kernel that
syncs with the host, say), the passes stay eager and ``graph_error`` says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from clovercode.engine import cachestate, capture, staticcache
from clovercode.engine.denoiser import CachedDenoiser, forward_kwargs, model_dtype

MIN_CAPACITY = 1024
LARGE_STEP = 8192


def wants_graphs(setting: str, device: str) -> bool:
    """``engine.compile``: off never; auto only on CUDA; static always (graphs only where CUDA is)."""
    return setting == "static" or (setting == "auto" and device.startswith("cuda"))


def capacity_for(length: int, minimum: int = MIN_CAPACITY) -> int:
    """Capacities double up to ``LARGE_STEP`` (a growing conversation recaptures its graphs rarely),
    then grow in steps of it: doubling a 32k prompt's would double its memory (a pass attends over its
    filled span rounded up to a power of two, which can reach the capacity)."""
    size = minimum
    while size < length and size < LARGE_STEP:
        size *= 2
    if size < length:
        size = -(-length // LARGE_STEP) * LARGE_STEP
    return size


@dataclass
class _IO:
    """The static inputs and output of one kind of pass."""

    ids: Any  # (R, q) long
    positions: Any  # (R, q) long
    mask: Any  # (R, 1, q, span) additive
    span: int = 0  # the key positions the pass attends over (the filled part, rounded up)
    logits: Any = None  # (R, q or 1, V), the output buffer of the captured graph
    graph: Any = None


class StaticPasses:
    """Denoise / commit passes of R rows over a ``StaticKV``; CUDA graphs when ``graphs``."""

    def __init__(self, model: Any, kv: staticcache.StaticKV, graphs: bool, backend: Any = None,
                 note: Callable[[str], None] | None = None):
        """``backend``: the CUDA calls of a capture (``capture.CudaGraphs`` on CUDA; the tests pass a
        stand-in to run the capture logic on the CPU). ``note``: told once when capturing fails."""
        self.model = model
        self.kv = kv
        self.dtype = model_dtype(model)
        self.device = next(model.parameters()).device
        self.graphs = graphs and (self.device.type == "cuda" or backend is not None)
        self.note = note
        kwargs = forward_kwargs(model)
        self.cache_arg, self.slices_logits = str(kwargs["cache"]), bool(kwargs["logits_to_keep"])
        self.io: dict[tuple[str, int], _IO] = {}
        self.graph_error: str | None = None
        self.captured = 0
        self.snap: cachestate.Snapshot | None = None  # committed state, taken at a block's first denoise
        self.keys = torch.arange(kv.capacity, device=self.device)
        self.backend = (backend or capture.CudaGraphs()) if self.graphs else None

    def run(self, kind: str, block: Any, start: int) -> Any:
        """Logits for ``block`` (R, q) at positions start..start+q-1: (R, q, V) for a denoise pass
        (state left as it was), (R, 1, V) for a commit (state advanced by q)."""
        rows, q = block.shape
        if start + q > self.kv.capacity:
            raise ValueError(f"the static cache holds {self.kv.capacity} tokens; a pass needs {start + q}")
        # attend over the filled part rounded up to a power of two (a graph per span), not the capacity
        io = self._io(kind, q, capture.span_for(start + q, self.kv.capacity, min(256, self.kv.capacity)))
        io.ids.copy_(block, non_blocking=True)
        io.positions.copy_((self.keys[:q] + start).expand(rows, q))
        self.kv.slots.index, self.kv.slots.span = io.positions[0], io.span
        if kind == "denoise" and self.snap is None:
            self.snap = cachestate.snapshot(self.kv.cache)
        try:
            if self.graphs and self.graph_error is None:
                logits = self._replay(kind, io).clone()  # the graph's output buffer: the next replay overwrites it
            else:  # a tensor of this pass's own: copying it (16 MB at a Clover block) would be pure cost
                logits = self._forward(kind, io)
        finally:
            if kind == "denoise":
                cachestate.restore(self.kv.cache, self.snap)
        if kind == "commit":
            self.snap = None
            self.kv.set_length(start + q)
        return logits

    def reload(self, cache: Any, length: int) -> None:
        """Fill the static cache from a prefilled dynamic one (a new prompt)."""
        self.kv.load(cache, length)
        self.snap = None

    def _fill_mask(self, kind: str, io: _IO) -> None:
        """Write the pass's (R, 1, q, span) additive mask into its buffer from the positions on the
        device: causal within the block for commits, the whole block for denoising. Part of the pass
        (and of its graph), so the host builds no mask per pass; the buffer is made once per kind and
        block length."""
        positions = io.positions[:, :, None]  # (R, q, 1)
        keys = self.keys[None, None, :io.span]
        allowed = keys <= positions if kind == "commit" else keys <= positions[:, -1:]
        zero = torch.zeros((), dtype=self.dtype, device=self.device)
        io.mask.copy_(torch.where(allowed, zero, torch.finfo(self.dtype).min)[:, None])

    def _io(self, kind: str, q: int, span: int) -> _IO:
        key = (kind, q, span)
        if key not in self.io:
            rows = self.kv.rows
            self.io[key] = _IO(torch.zeros(rows, q, dtype=torch.long, device=self.device),
                               torch.zeros(rows, q, dtype=torch.long, device=self.device),
                               torch.zeros(rows, 1, q, span, dtype=self.dtype, device=self.device), span=span)
        return self.io[key]

    def _forward(self, kind: str, io: _IO) -> Any:
        self._fill_mask(kind, io)
        kwargs: dict[str, Any] = {self.cache_arg: self.kv.cache, "use_cache": True}
        if kind == "commit" and self.slices_logits:
            kwargs["logits_to_keep"] = 1
        with torch.no_grad():
            out = self.model(input_ids=io.ids, position_ids=io.positions, attention_mask=io.mask, **kwargs)
        return out.logits if kind == "denoise" or not self.slices_logits else out.logits[:, -1:]

    def _save(self, io: _IO) -> tuple[Any, list[Any]]:
        """The committed state, and the key and value rows a pass writes (scratch past the committed
        length, but a failed capture must leave every byte as it was)."""
        index = io.positions[0]
        written = [(layer.keys.index_select(2, index), layer.values.index_select(2, index))
                   for layer in self.kv.attention_layers()]
        return cachestate.snapshot(self.kv.cache), written

    def _restore(self, saved: tuple[Any, list[Any]]) -> None:
        snap, written = saved
        cachestate.restore(self.kv.cache, snap)
        index = self.kv.slots.index
        for layer, (keys, values) in zip(self.kv.attention_layers(), written):
            layer.keys.index_copy_(2, index, keys)
            layer.values.index_copy_(2, index, values)

    def _replay(self, kind: str, io: _IO) -> Any:
        if io.graph is None:
            try:
                # warm-up passes, then the recording; the cache is put back after each and on any failure
                io.graph, io.logits = capture.capture(lambda: self._forward(kind, io), lambda: self._save(io),
                                                      self._restore, self.backend)
                self.captured += 1
            except Exception as exc:  # any capture failure: stay eager, say why once
                self.graph_error = capture.first_line(exc)
                if self.note is not None:
                    self.note(f"CUDA graphs skipped (the passes run eagerly): capturing a {kind} pass failed: "
                              f"{self.graph_error}")
                return self._forward(kind, io)
        io.graph.replay()
        return io.logits


@dataclass
class StaticState:
    length: int
    last_logits: Any


class StaticDenoiser:
    """The engine's batch-1 Denoiser over a static cache (CUDA graphs on CUDA). Prompt reuse and the
    prefill are ``CachedDenoiser``'s; the static cache is filled from its cache after each prefill."""

    def __init__(self, model: Any, graphs: bool = True, reuse_prompt: bool = False, min_capacity: int = MIN_CAPACITY,
                 headroom: int = 256, keep_tokens: int = 0, note: Callable[[str], None] | None = None,
                 backend: Any = None, limit: int | None = None):
        # limit: the plan's positions for one sequence, held by the prefill (the static cache has its own)
        self.inner = CachedDenoiser(model, reuse_prompt=reuse_prompt, keep_tokens=keep_tokens, limit=limit)
        self.headroom = headroom  # room for the answer at prefill; more is made as it grows
        self.model = model
        self.device = self.inner.device
        self.graphs = graphs
        self.min_capacity = min_capacity
        self.passes: StaticPasses | None = None
        self.unsupported: str | None = None  # why this model's cache stays dynamic
        self.note = note  # told once when a fast path is skipped
        self.backend = backend  # the capture seam (tests); None: CUDA's own

    @property
    def layout(self) -> str:
        return self.inner.layout

    @property
    def reused_tokens(self) -> int:
        return self.inner.reused_tokens

    def forget_prompts(self, scope: str | None = None) -> None:
        self.inner.forget_prompts(scope)

    @property
    def scope(self) -> str:
        return self.inner.scope

    @scope.setter
    def scope(self, value: str) -> None:
        self.inner.scope = value

    @property
    def graph_error(self) -> str | None:
        return self.passes.graph_error if self.passes is not None else None

    def prefill(self, ids: Sequence[int]) -> Any:
        """A StaticState; or, for a cache the static one cannot hold (sliding windows, a model's own
        cache class), the inner CachedState: that turn's passes stay on the dynamic cache."""
        state = self.inner.prefill(ids)
        if self.unsupported is None:
            try:
                self._load(state.cache, state.length)
            except staticcache.Unsupported as exc:
                self.unsupported = str(exc)
                if self.note is not None:
                    self.note(f"static cache and CUDA graphs skipped: the model's cache has {self.unsupported}")
        if self.unsupported is not None:
            return state
        return StaticState(state.length, state.last_logits)

    def _load(self, cache: Any, length: int) -> None:
        needed = length + self.headroom
        if self.passes is not None and self.passes.kv.fits(cache, 1, needed):
            self.passes.reload(cache, length)
            return
        kv = staticcache.build(cache, 1, capacity_for(needed, self.min_capacity))
        self.passes = StaticPasses(self.model, kv, self.graphs, self.backend, self.note)

    def _block(self, block: Any) -> Any:
        return torch.as_tensor(block, dtype=torch.long).view(1, -1)

    def denoise(self, state: Any, block: Any) -> Any:
        if not isinstance(state, StaticState):
            return self.inner.denoise(state, block)
        self._grow(state.length + len(block))
        return self.passes.run("denoise", self._block(block), state.length)[0].float()

    def commit(self, state: Any, block: Any) -> Any:
        if not isinstance(state, StaticState):
            return self.inner.commit(state, block)
        self._grow(state.length + len(block))
        logits = self.passes.run("commit", self._block(block), state.length)
        state.length += len(block)
        state.last_logits = logits[0, -1].float()
        return state

    def _grow(self, needed: int) -> None:
        """A longer answer than the capacity: move to a cache twice as large (graphs are recaptured)."""
        assert self.passes is not None, "prefill first"
        kv = self.passes.kv
        if needed <= kv.capacity:
            return
        bigger = staticcache.build(kv.cache, 1, capacity_for(max(needed, kv.capacity + 1), kv.capacity))
        self.passes = StaticPasses(self.model, bigger, self.graphs, self.backend, self.note)

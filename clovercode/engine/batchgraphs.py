"""Batched slot forwards replayed as CUDA graphs, one per batch-size bucket (``engine.compile``).

An eager forward of Clover launches thousands of kernels from Python; with 8 rows the GPU waits on
the host. ``GraphedBatch`` wraps a ``SlotBatchDenoiser`` and replays its forward as a graph recorded
for the bucket the step falls in:

* **rows**: rounded up to a bucket (1, 2, 4, 8, … up to the slot capacity, as vLLM and SGLang do).
  Padding rows run on the free buffer rows past the live ones (length 0, their blocks written into
  scratch that no sequence owns) and their logits are dropped;
* **span**: the keys attended are the filled part, ``max(length) + L``, rounded up to a power of two
  (at least 256, at most the buffers' time axis) rather than the whole buffer: a graph per span
  bucket, so a short batch in a long buffer does not pay for the buffer;
* **mask**: computed inside the graph from the rows' lengths and commit flags (device tensors the
  host fills): no host-side mask per pass, one mask buffer per graph;
* **capture**: ``capture.capture``: two warm-up passes, then the recording; the key and value
  positions a pass writes are saved before and written back after every pass and after any failure,
  so a capture that raises leaves the slots bit-identical; that step and every later one run
  eagerly, and a note says why.

Graphs apply where the step is fixed-shape: every live row in the forward, in buffer order (the
scheduler's normal step), attention-only caches (a Gated DeltaNet step gathers and scatters per-row
states whose committing rows vary: eager). A row's ``keep`` (the positions its caller reads) is
ignored there: the graph computes every position's logits (the eager path zeroes the others; the
caller reads only the kept ones). Other steps run the wrapped denoiser's eager forward, which gives
the same logits.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from clovercode.engine import capture
from clovercode.engine.batchseam import Row


@dataclass
class _Graph:
    step: Any  # the static batchcache.Step the graph reads
    ids: Any  # (bucket, L) long
    offsets: Any  # (L,) long: 0 … L−1
    graph: Any = None
    logits: Any = None  # (bucket, L, V): what a replay writes


class GraphedBatch:
    """A ``BatchDenoiser`` over ``inner`` (a ``SlotBatchDenoiser``) whose full steps replay graphs."""

    def __init__(self, inner: Any, graphs: bool, note: Callable[[str], None] | None = None, backend: Any = None):
        self.inner = inner
        self.graphs = graphs
        self.note = note
        self.backend = backend
        self.captured: dict[tuple[Any, ...], _Graph] = {}
        self.graph_error: str | None = None
        self.replays = 0
        self.buffers: Any = None  # a weak reference to the slot buffer the graphs were recorded on

    # the seam's other calls are the wrapped denoiser's
    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def scope(self) -> str:
        return self.inner.scope

    @scope.setter
    def scope(self, value: str) -> None:
        self.inner.scope = value

    def forward(self, rows: Sequence[Row]) -> Any:
        import torch

        inner = self.inner
        if not self._graphable(rows):
            return inner.forward(rows)
        step, order = inner._plan(rows)
        count = len(rows)
        if step.window != (0, count) or count != len(inner.slots.slot_at):
            return inner.forward(rows)  # not every live row, in buffer order: eager
        inner.slots.reserve(step.kv_len)
        span = capture.span_for(step.kv_len, inner.slots.time)
        bucket = capture.bucket_for(count, inner.capacity)
        buffer = inner.slots.layers[0].buffers[0]
        if self.buffers is None or self.buffers() is not buffer:  # the buffers grew: every graph read the old ones
            self.captured.clear()
            self.buffers = weakref.ref(buffer)
        key = (bucket, step.block, span)
        graph = self.captured.get(key) or self._new_graph(bucket, step.block, span)
        blocks = torch.stack([torch.as_tensor(rows[i].block).view(-1) for i in order]).to(inner.device, torch.long)
        self._fill(graph, count, blocks, step)
        if graph.graph is None:
            try:
                graph.graph, graph.logits = capture.capture(lambda: self._run(graph), lambda: self._save(graph),
                                                            lambda saved: self._restore(graph, saved),
                                                            self.backend or capture.CudaGraphs())
            except Exception as exc:  # any failure: the slots are as they were; this and later steps run eagerly
                self.graph_error = capture.first_line(exc)
                if self.note is not None:
                    self.note(f"CUDA graphs for batched steps skipped (eager from now on): capturing a step of "
                              f"{bucket} rows failed: {self.graph_error}")
                return inner.forward(rows)
            self.captured[key] = graph
        graph.graph.replay()
        self.replays += 1
        logits = graph.logits[:count].clone()
        for i in order:
            if rows[i].commit:
                inner.slots.lengths[rows[i].slot] += step.block
        if order != sorted(order):
            inverse = [0] * len(order)
            for position, index in enumerate(order):
                inverse[index] = position
            logits = logits.index_select(0, torch.tensor(inverse, device=logits.device))
        return logits

    def _graphable(self, rows: Sequence[Row]) -> bool:
        slots = self.inner.slots
        return self.graphs and self.graph_error is None and bool(rows) and not slots.has_linear and slots.layers is not None

    def _new_graph(self, bucket: int, block: int, span: int) -> _Graph:
        import torch

        from clovercode.engine.batchcache import Step

        device = self.inner.device
        lengths = torch.zeros(bucket, dtype=torch.long, device=device)
        positions = torch.zeros(bucket, block, dtype=torch.long, device=device)
        step = Step(phys=torch.arange(bucket, device=device), lengths=lengths, positions=positions,
                    commit=torch.zeros(bucket, dtype=torch.bool, device=device), window=(0, bucket), kv_len=span,
                    block=block, commit_rows=torch.zeros(0, dtype=torch.long, device=device))
        return _Graph(step, torch.zeros(bucket, block, dtype=torch.long, device=device),
                      torch.arange(block, device=device))

    def _fill(self, graph: _Graph, count: int, blocks: Any, step: Any) -> None:
        """The step's inputs into the graph's buffers; padding rows: length 0, denoising, token 0."""
        graph.ids[:count].copy_(blocks)
        graph.ids[count:].zero_()
        graph.step.lengths[:count].copy_(step.lengths)
        graph.step.lengths[count:].zero_()
        graph.step.commit[:count].copy_(step.commit)
        graph.step.commit[count:].zero_()
        graph.step.positions.copy_(graph.step.lengths[:, None] + graph.offsets)

    def _run(self, graph: _Graph) -> Any:
        """One pass as recorded: positions and the mask from the lengths on the device, then the model."""
        from clovercode.engine.batchdenoiser import _block_masks

        step = graph.step
        step.positions.copy_(step.lengths[:, None] + graph.offsets)
        return self.inner._run(step, graph.ids, _block_masks(step, self.inner.dtype), self.inner.bias_route)

    def _save(self, graph: _Graph) -> list[Any]:
        """The key and value entries a pass of this graph writes (each row's block positions)."""
        rows, times = graph.step.phys[:, None], graph.step.positions
        return [[buffer[rows, :, times].clone() for buffer in layer.buffers] for layer in self.inner.slots.layers]

    def _restore(self, graph: _Graph, saved: list[Any]) -> None:
        rows, times = graph.step.phys[:, None], graph.step.positions
        for layer, parts in zip(self.inner.slots.layers, saved):
            for buffer, part in zip(layer.buffers, parts):
                buffer[rows, :, times] = part

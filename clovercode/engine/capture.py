"""Capturing a pass as a CUDA graph: warm-up, recording, and putting the state back whatever happens.

Shared by the batch-1 static passes (``graphs.StaticPasses``) and the batched passes
(``batchgraphs.GraphedBatch``). The CUDA calls sit behind ``CudaGraphs`` so that the logic around
them (how many warm-up passes, what is restored after a failure, which buffers a replay writes) runs
in the CPU tests with a stand-in that records the pass and replays it eagerly.

Practice taken from vLLM and SGLang: batch sizes are rounded up to buckets (1, 2, 4, 8, … up to the
capacity), so a handful of graphs serve every batch; each capture is preceded by ``WARMUPS`` eager
passes on a side stream (the first pass of a shape initialises lazy state: cuBLAS workspaces,
autotuned kernels, allocator pools; capturing it would record that one-off work or fail on it);
the model's state is snapshotted before the first warm-up and restored after each pass and after
any failure, so a capture that raises leaves the cache bit-identical and the pass runs eagerly.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

WARMUPS = 2


def buckets(capacity: int) -> list[int]:
    """1, 2, 4, … below ``capacity``, then ``capacity`` itself."""
    sizes, size = [], 1
    while size < capacity:
        sizes.append(size)
        size *= 2
    return sizes + [capacity]


def bucket_for(rows: int, capacity: int) -> int:
    """The smallest bucket that holds ``rows`` rows."""
    if not 1 <= rows <= capacity:
        raise ValueError(f"{rows} rows do not fit a batch of {capacity}")
    return next(size for size in buckets(capacity) if size >= rows)


def span_for(needed: int, limit: int, minimum: int = 256) -> int:
    """Keys a pass attends over: the filled part rounded up to a power of two (so a graph serves many
    lengths), at most ``limit`` (the buffer's time axis)."""
    span = minimum
    while span < needed:
        span *= 2
    return min(span, limit) if needed <= limit else needed


class CudaGraphs:
    """The CUDA side of a capture (the seam the CPU tests replace)."""

    def __init__(self) -> None:
        import torch

        self.pool = torch.cuda.graph_pool_handle()

    @contextlib.contextmanager
    def side_stream(self) -> Iterator[None]:
        import torch

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            yield
        torch.cuda.current_stream().wait_stream(stream)

    def record(self, run: Callable[[], Any]) -> tuple[Any, Any]:
        """(graph, the output tensor its replays write)."""
        import torch

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = run()
        return graph, out

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()


def capture(run: Callable[[], Any], save: Callable[[], Any], restore: Callable[[Any], None], backend: Any,
            warmups: int = WARMUPS) -> tuple[Any, Any]:
    """Warm ``run`` up ``warmups`` times on a side stream, then record it: (graph, output buffer).
    The state ``save`` took is put back after every pass, and after any failure before it propagates."""
    if warmups < 1:
        raise ValueError("a capture needs at least one warm-up pass")
    snap = save()
    try:
        with backend.side_stream():
            for _ in range(warmups):
                run()
                restore(snap)
        return backend.record(run)
    except BaseException:
        with contextlib.suppress(Exception):
            backend.synchronize()
        raise
    finally:
        restore(snap)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:160]}" if text else type(exc).__name__

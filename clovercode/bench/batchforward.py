"""One batched forward over B rows against B batch-1 forwards, side by side (a micro-benchmark for
``bench`` to call, never a timed test).

B prompts of different lengths are admitted into a ``SlotBatchDenoiser`` and prefilled into B
``CachedDenoiser`` states; then, alternating so machine load hits both alike, one batched forward of B
denoising rows is timed against B ``CachedDenoiser.denoise`` calls. The fastest of ``repeats`` counts.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BatchForwardTiming:
    rows: int
    block: int
    prompt_tokens: tuple[int, ...]
    batched_s: float  # one forward over all rows
    solo_s: float  # the rows one after another at batch 1

    @property
    def speedup(self) -> float:
        return self.solo_s / self.batched_s


def measure_batch_forward(model: Any, rows: int = 8, block: int = 16, prompt_tokens: tuple[int, int] = (64, 512),
                          repeats: int = 5, seed: int = 0) -> BatchForwardTiming:
    """Time one forward of ``rows`` blocks of ``block`` tokens (prompts drawn in ``prompt_tokens``)."""
    return BatchForwardPair(model, rows, block, prompt_tokens, seed).time(repeats)


class BatchForwardPair:
    """The two ways, admitted and prefilled once, so that they can be timed again and again (``bench
    serve --bound`` times them between the modes it bounds)."""

    def __init__(self, model: Any, rows: int = 8, block: int = 16, prompt_tokens: tuple[int, int] = (64, 512),
                 seed: int = 0):
        import torch

        from clovercode.engine.batchdenoiser import SlotBatchDenoiser
        from clovercode.engine.batchseam import Row
        from clovercode.engine.denoiser import CachedDenoiser

        rng = random.Random(seed)
        vocab = model.get_output_embeddings().weight.shape[0]
        self.rows, self.block = rows, block
        self.lengths = tuple(rng.randrange(prompt_tokens[0], prompt_tokens[1] + 1) for _ in range(rows))
        prompts = [[rng.randrange(vocab) for _ in range(n)] for n in self.lengths]
        self.batched, self.solo = SlotBatchDenoiser(model, rows), CachedDenoiser(model)
        slots = [self.batched.admit(p)[0] for p in prompts]
        self.states = [self.solo.prefill(p) for p in prompts]
        self.device = self.batched.device
        self.blocks = [torch.tensor([rng.randrange(vocab) for _ in range(block)], device=self.device) for _ in range(rows)]
        # denoising rows leave every slot as it was, so each repeat times the same work
        self.batch = [Row(s, b, False) for s, b in zip(slots, self.blocks)]

    def time(self, repeats: int = 5) -> BatchForwardTiming:
        import torch

        def wait() -> None:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)

        def run_batched() -> None:
            self.batched.forward(self.batch)

        def run_solo() -> None:
            for state, b in zip(self.states, self.blocks):
                self.solo.denoise(state, b)

        best = {run_batched: float("inf"), run_solo: float("inf")}
        for round_ in range(repeats + 1):
            for fn in best:
                wait()
                start = time.perf_counter()
                fn()
                wait()
                if round_:  # the first round warms both paths up
                    best[fn] = min(best[fn], time.perf_counter() - start)
        return BatchForwardTiming(self.rows, self.block, self.lengths, best[run_batched], best[run_solo])

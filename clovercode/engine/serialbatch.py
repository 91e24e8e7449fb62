"""The reference ``BatchDenoiser`` (engine/batchseam.py): one batch-1 ``CachedDenoiser`` state per slot,
the rows of a "batched" forward run one after another.

It is correct by construction (every row runs exactly the batch-1 prefill / denoise / commit calls),
so it is what the batched decoder is tested against and what the engine falls back to for a model the
fast batched denoiser does not take. It is not faster than decoding the requests one at a time.
"""

from __future__ import annotations

from typing import Any, Sequence

from clovercode.engine.batchseam import Row, admit_each
from clovercode.engine.denoiser import CachedDenoiser, CachedState


class SerialBatchDenoiser:
    def __init__(self, model: Any, capacity: int):
        if capacity < 1:
            raise ValueError("a batch denoiser needs at least one slot")
        self.capacity = capacity
        self.denoiser = CachedDenoiser(model)  # no prompt reuse: every slot starts from its own prefill
        self.states: dict[int, CachedState] = {}

    def admit(self, ids: Sequence[int]) -> tuple[int, Any]:
        slot = next((s for s in range(self.capacity) if s not in self.states), None)
        if slot is None:
            raise ValueError(f"all {self.capacity} slots are taken")
        state = self.denoiser.prefill(ids)
        self.states[slot] = state
        return slot, state.last_logits

    def admit_many(self, prompts: Sequence[Sequence[int]]) -> list[tuple[int, Any]]:
        return admit_each(self, prompts)

    def forward(self, rows: Sequence[Row]) -> Any:
        """The batch-1 calls, row by row. A committing row runs the batch-1 commit, which computes only
        the last position's logits (what predicts the next token); its other positions are zeros."""
        import torch

        if len({r.slot for r in rows}) != len(rows) or len({len(r.block) for r in rows}) > 1:
            raise ValueError("a batched forward needs distinct slots and blocks of one length")
        out = []
        for row in rows:
            state = self.states[row.slot]
            if row.commit:
                self.denoiser.commit(state, row.block)
                logits = torch.zeros(len(row.block), state.last_logits.shape[-1], device=state.last_logits.device)
                logits[-1] = state.last_logits
            else:
                logits = self.denoiser.denoise(state, row.block)
            out.append(logits)
        return torch.stack(out)

    def length(self, slot: int) -> int:
        return self.states[slot].length

    def release(self, slot: int) -> None:
        self.states.pop(slot, None)

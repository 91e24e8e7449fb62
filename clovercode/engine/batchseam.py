"""The batched denoiser seam: several sequences, each at its own length, advanced by one forward.

A ``BatchDenoiser`` holds up to ``capacity`` sequences in slots. ``admit`` prefills one prompt (its state is
what a batch-1 prefill gives) and returns its slot and the logits that predict its first new token;
``admit_many`` does that for several prompts, in one forward where the denoiser can. ``forward`` runs ONE model forward over the given rows, each naming a slot, a block of
token ids (the same length for every row) and whether the row commits:
- a denoising row sees its committed prefix and every position of its own block (the batch-1
  ``Denoiser.denoise`` semantics) and leaves its slot's state untouched;
- a committing row attends causally (the ``Denoiser.commit`` semantics) and its slot advances by the block.
It returns logits ``(rows, block, vocab)`` in float32, row i for ``rows[i]``; for a committing row the last
position's logits predict the token after the block. A row's ``keep`` names the positions whose logits its
caller reads: a denoiser may compute only those and leave the others zero. ``release`` frees a slot for the next ``admit``.

Every row's logits must equal what the batch-1 ``CachedDenoiser`` gives for the same sequence (within
float tolerance): the greedy output of a request decoded in a batch is the output it gets alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence


@dataclass(frozen=True)
class Row:
    slot: int
    block: Any  # (L,) long tensor of token ids, mask tokens included
    commit: bool = False
    keep: Any = None  # (L,) bool: the positions whose logits the caller reads (None: all); others may be zeros


class BatchDenoiser(Protocol):
    capacity: int

    def admit(self, ids: Sequence[int]) -> tuple[int, Any]:
        """Prefill ``ids`` into a free slot → (slot, last_logits (V,) float32). Raises ValueError when full."""

    def admit_many(self, prompts: Sequence[Sequence[int]]) -> list[tuple[int, Any]]:
        """``admit`` for several prompts, in one forward where the denoiser can (else one by one), with
        the same guarantee: each row's state and last logits are what its batch-1 prefill gives."""

    def forward(self, rows: Sequence[Row]) -> Any:
        """One forward over ``rows`` (distinct slots, equal block lengths) → logits (len(rows), L, V)."""

    def length(self, slot: int) -> int:
        """Committed tokens in ``slot`` (prompt included)."""

    def release(self, slot: int) -> None:
        """Forget the sequence in ``slot``; unknown or free slots are ignored."""


def admit_each(denoiser: BatchDenoiser, prompts: Sequence[Sequence[int]]) -> list[tuple[int, Any]]:
    """``admit_many`` one prompt at a time: all of them, or (when one fails) none."""
    done: list[tuple[int, Any]] = []
    try:
        for ids in prompts:
            done.append(denoiser.admit(ids))
    except BaseException:
        for slot, _ in done:
            denoiser.release(slot)
        raise
    return done

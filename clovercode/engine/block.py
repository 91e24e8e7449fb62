"""The block being denoised, kept on the device that holds the model's logits.

Token ids and which positions are still masked live in tensors there, and a pass's acceptance is a
handful of tensor ops on them. The host learns what it must know (the block's tokens and its first
masked position, for the stop check and for the loop's end) from ONE read per pass: ids and the
first masked position share one buffer, so ``read`` is a single transfer.
"""

from __future__ import annotations

from typing import Any

ACCEPTED = -2.0  # added to an accepted position's confidence: below every threshold and every masked position


class Block:
    """``size`` positions, all masked but the first ``offset`` (the logit shift's free token)."""

    def __init__(self, size: int, fill: int, offset: int, device: Any):
        import torch

        self.size, self.fill, self.offset = size, fill, offset
        self.packed = torch.full((size + 1,), fill, dtype=torch.long, device=device)  # ids, then the first masked
        self.tokens = self.packed[:size]
        # 0 where masked, ACCEPTED where not; the extra last entry stays 0, so argmax finds the first
        # masked position, or ``size`` when none is left.
        self.open = torch.zeros(size + 1, dtype=torch.float32, device=device)
        self.lead = 0  # host: the first masked position as of the last read (all before it are final)
        self.remaining = size  # host: masked positions (kept for topk and steps, which need the count)

    def put_first(self, token: Any) -> None:
        """Position 0 takes ``token`` ((1,) ids) and is final."""
        self.tokens[:1].copy_(token)
        self.open[0] = ACCEPTED
        self.lead, self.remaining = 1, self.remaining - 1

    # A pass works on positions lead… only: everything before the first masked position is final, so
    # leaving it out changes no choice (the strategies only ever pick masked positions) and saves the
    # softmax over the vocabulary for those rows.

    def rows(self, logits: Any) -> Any:
        """The logits rows that predict positions lead… (with the shift, row i predicts position i + 1)."""
        return logits[self.lead - self.offset: self.size - self.offset]

    def ranked(self, confidence: Any) -> Any:
        """Confidence where masked, below zero where accepted (what ``sampler.select_ranked`` ranks)."""
        return confidence + self.open[self.lead:self.size]

    def accept(self, proposed: Any, chosen: Any) -> None:
        """Put the ``chosen`` rows of ``proposed`` in place (both over positions lead…)."""
        import torch

        view = self.tokens[self.lead:]
        view.copy_(torch.where(chosen, proposed, view))
        self.open[self.lead:self.size].masked_fill_(chosen, ACCEPTED)

    def read(self) -> list[int]:
        """The block's ids followed by its first masked position: the pass's one host sync."""
        import torch

        torch.argmax(self.open, out=self.packed[self.size])
        return self.packed.tolist()

    def remask(self, position: int) -> None:
        """Send ``position`` back to masked (a grammar forbade its token)."""
        self.tokens[position] = self.fill
        self.open[position] = 0.0
        self.remaining += 1

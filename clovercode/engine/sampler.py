"""Token proposals and the choice of which masked positions to accept: small pure functions."""

from __future__ import annotations

import math
from typing import Any


def propose(logits: Any, temperature: float = 0.0, top_p: float = 1.0, generator: Any = None) -> tuple[Any, Any]:
    """Pick a token per row of ``logits`` (n, V) and its confidence (probability under the
    distribution it was drawn from). Greedy when ``temperature`` is 0."""
    import torch

    logits = logits.float()
    if temperature <= 0:
        probs = torch.softmax(logits, dim=-1)
        confidence, tokens = probs.max(dim=-1)
        return tokens, confidence
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        probs = nucleus(probs, top_p)
    tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tokens, probs.gather(-1, tokens[:, None]).squeeze(-1)


def nucleus(probs: Any, top_p: float) -> Any:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p``; renormalise."""
    import torch

    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the tokens ranked above each one
    sorted_probs = sorted_probs.masked_fill(before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)


def select(confidence: Any, masked: Any, strategy: str, *, threshold: float = 0.9, top_k: int = 1,
           passes_left: int = 1) -> Any:
    """Which masked positions to accept this pass (a bool tensor like ``masked``).

    threshold: every masked position with confidence ≥ threshold; steps: the most confident
    ceil(remaining / passes_left); topk: the ``top_k`` most confident. Always at least one position
    while any is masked; ties go to the leftmost position."""
    import torch

    remaining = int(masked.sum())
    chosen = torch.zeros_like(masked)
    if remaining == 0:
        return chosen
    if strategy == "threshold":
        chosen = masked & (confidence >= threshold)
        count = 1 if not bool(chosen.any()) else 0
    elif strategy == "topk":
        count = min(top_k, remaining)
    elif strategy == "steps":
        count = remaining if passes_left <= 1 else math.ceil(remaining / passes_left)
    else:
        raise ValueError(f"unknown strategy {strategy!r}")
    if count:
        ranked = torch.where(masked, confidence.float(), torch.full_like(confidence, -1.0, dtype=torch.float))
        order = torch.sort(ranked, descending=True, stable=True).indices[:count]
        chosen[order] = True
    return chosen

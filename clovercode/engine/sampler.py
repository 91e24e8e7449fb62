"""Token proposals and the choice of which masked positions to accept: small pure functions."""

from __future__ import annotations

import math
from typing import Any, Mapping


def propose(logits: Any, temperature: float = 0.0, top_p: float = 1.0, generator: Any = None,
            allowed: Mapping[int, Any] | None = None) -> tuple[Any, Any]:
    """Pick a token per row of ``logits`` (n, V) and its confidence (probability under the
    distribution it was drawn from). Greedy when ``temperature`` is 0.

    ``allowed`` maps a row to a bool mask (V,) of the tokens a grammar permits there: the token is
    chosen among those, but its confidence stays its probability under the model's whole
    distribution, so a constraint never makes a position look surer than the model is (and an
    output the grammar already allows is decoded exactly as without it)."""
    import torch

    logits = logits.float()
    if temperature <= 0:
        probs = torch.softmax(logits, dim=-1)
        if not allowed:
            confidence, tokens = probs.max(dim=-1)
            return tokens, confidence
        tokens = _restricted(probs, allowed, -1.0).argmax(dim=-1)  # -1: below any probability
        return tokens, probs.gather(-1, tokens[:, None]).squeeze(-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        probs = nucleus(probs, top_p)
    draw = probs
    if allowed:
        draw = _restricted(probs, allowed, 0.0)
        for row in allowed:  # the nucleus held no allowed token: draw from the allowed ones alone
            if float(draw[row].sum()) <= 0.0:
                draw[row] = torch.softmax(logits[row] / temperature, dim=-1) * _fit(allowed[row], draw.shape[-1]).to(draw.device)
    tokens = torch.multinomial(draw, 1, generator=generator).squeeze(-1)
    return tokens, probs.gather(-1, tokens[:, None]).squeeze(-1)


def pick(logits: Any, temperature: float = 0.0, top_p: float = 1.0, generator: Any = None) -> Any:
    """:func:`propose`'s tokens alone, for a row whose confidence nobody reads: greedy, the argmax of
    the logits (what transformers' greedy ``generate`` takes), with no softmax over the vocabulary."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    return propose(logits, temperature, top_p, generator)[0]


def _restricted(probs: Any, allowed: Mapping[int, Any], fill: float) -> Any:
    """``probs`` with the forbidden tokens of each constrained row set to ``fill``."""
    import torch

    out = probs.clone()
    for row, mask in allowed.items():
        out[row] = torch.where(_fit(mask, out.shape[-1]).to(out.device), out[row], torch.full_like(out[row], fill))
    return out


def _fit(mask: Any, size: int) -> Any:
    """A mask over the tokenizer's vocabulary, fitted to the model's logits (padded rows: forbidden)."""
    import torch

    if mask.numel() >= size:
        return mask[:size]
    return torch.cat([mask, torch.zeros(size - mask.numel(), dtype=torch.bool)])


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


def select_ranked(ranked: Any, strategy: str, *, threshold: float = 0.9, count: int = 1) -> Any:
    """:func:`select` as tensor ops alone, with no host sync, for the pass loop (indices stay tensors:
    ``index_fill_``, never an index read back to the host).

    ``ranked`` holds each position's confidence where it is masked and less than 0 where it is
    not (the decoder adds -2 to accepted positions); at least one position is masked. ``count`` is
    the number to accept for topk and steps, which the caller knows from its own count of masked
    positions. The result equals :func:`select`'s: for threshold, the most confident masked
    position is always in the set (leftmost on a tie, as ``argmax`` picks), and when any position
    reaches the threshold it is one of them, so adding it changes nothing."""
    import torch

    if strategy == "threshold":
        return (ranked >= threshold).index_fill_(0, ranked.argmax().view(1), True)
    if strategy not in ("topk", "steps"):
        raise ValueError(f"unknown strategy {strategy!r}")
    chosen = torch.zeros(ranked.shape, dtype=torch.bool, device=ranked.device)
    return chosen.index_fill_(0, torch.sort(ranked, descending=True, stable=True).indices[:count], True)

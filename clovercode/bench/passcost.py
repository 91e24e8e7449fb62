"""Host overhead per pass: the real decode loop, driven by a stand-in denoiser that returns precomputed logits.

With no model in the loop, the wall time of a decode is what the loop itself costs: proposing tokens,
choosing positions, stop checks, streaming, bookkeeping. Divided by the forwards it would have asked
of a model (denoising and commit passes, as `DecodeStats` counts them), that is the host time each
forward pays on top of the model. On a GPU this is the time the device would sit idle between passes
unless the loop overlaps it; the target is ≤ 0.1 ms.

The stand-in's logits follow a fixed script: blocks of real, non-special tokens of the model's
vocabulary, every row confident (0.95) in the pass that accepts it and unsure (0.5) before, so a
threshold of 0.9 accepts ``per_pass`` positions a pass. The same script runs AR (B = 1: one commit
pass per token) and threshold 0.9.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Sequence

from clovercode.engine.decoder import DecodePlan
from clovercode.engine.stops import Stops

TARGET_US = 100.0


@dataclass(frozen=True)
class PassCost:
    schedule: str
    block_size: int
    tokens: int
    forwards: int
    per_pass_us: float  # the fastest of the repeats, per forward


class ScriptedLogits:
    """A denoiser stand-in (the ``Denoiser`` seam) that hands out precomputed logits: no model, no work."""

    def __init__(self, blocks: Sequence[Sequence[Any]], lasts: Sequence[Any]):
        self.blocks = blocks  # blocks[j][p]: (B, V) logits of the p-th denoising pass over the j-th block
        self.lasts = lasts  # (V,) logits that predict the first token of the next block
        self.commits = 0
        self.passes = 0

    def prefill(self, ids: Sequence[int]) -> Any:
        self.commits = self.passes = 0
        return SimpleNamespace(length=len(ids), last_logits=self.lasts[0])

    def denoise(self, state: Any, block: Any) -> Any:
        script = self.blocks[self.commits % len(self.blocks)]
        logits = script[min(self.passes, len(script) - 1)]
        self.passes += 1
        return logits

    def commit(self, state: Any, block: Any) -> Any:
        self.commits += 1
        self.passes = 0
        state.length += len(block)
        state.last_logits = self.lasts[self.commits % len(self.lasts)]
        return state


def script(tokens: Sequence[int], vocab: int, block_size: int, per_pass: int, distinct: int = 8) -> ScriptedLogits:
    """A stand-in for ``block_size`` whose blocks spell ``tokens`` (cycled), ``per_pass`` rows sure a pass."""
    import torch

    def row(token: int, confidence: float) -> Any:
        probs = torch.full((vocab,), (1 - confidence) / (vocab - 1))
        probs[token] = confidence
        return probs.log()

    def at(index: int) -> int:
        return int(tokens[index % len(tokens)])

    passes = max(1, math.ceil((block_size - 1) / per_pass))
    blocks = []
    for j in range(distinct):
        start = j * block_size
        blocks.append([torch.stack([row(at(start + i + 1), 0.95 if i // per_pass <= p else 0.5)
                                    for i in range(block_size)]) for p in range(passes)])
    lasts = [row(at(j * block_size), 0.95) for j in range(distinct)]
    return ScriptedLogits(blocks, lasts)


def measure(decode: Callable[..., Any], detok: Callable[[Sequence[int]], str], eos_ids: frozenset[int],
            tokens: Sequence[int], vocab: int, mask_id: int, block_size: int = 16, new_tokens: int = 256,
            repeats: int = 5, stop_strings: Sequence[str] = ("</tool_call>",)) -> list[PassCost]:
    """Host time per forward of ``decode`` (the engine's ``decode``, or another with its signature) for
    AR and threshold 0.9, each the fastest of ``repeats`` runs of ``new_tokens`` tokens."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the loop's tensors are tiny: a second intra-op thread only adds wake-ups
    try:
        return _measure(decode, detok, Stops(frozenset(eos_ids), tuple(stop_strings)), tokens, vocab, mask_id,
                        block_size, new_tokens, repeats)
    finally:
        torch.set_num_threads(threads)


def _measure(decode: Callable[..., Any], detok: Callable[[Sequence[int]], str], stops: Stops, tokens: Sequence[int],
             vocab: int, mask_id: int, block_size: int, new_tokens: int, repeats: int) -> list[PassCost]:
    rows = []
    prompt = [int(tokens[0])] * 8
    schedules = [("AR B=1", 1, 1)]
    if block_size > 1:
        schedules.append((f"threshold 0.9 B={block_size}", block_size, max(1, block_size // 2)))
    for name, size, per_pass in schedules:
        plan = DecodePlan(block_size=size, mask_id=mask_id, strategy="threshold", threshold=0.9,
                          max_new_tokens=new_tokens)
        stand_in = script(tokens, vocab, size, per_pass, distinct=max(1, 128 // size))
        best, forwards, made = math.inf, 0, 0
        for _ in range(repeats):
            started = time.perf_counter()
            result = decode(stand_in, prompt, plan, detok, stops, on_text=_ignore)
            elapsed = time.perf_counter() - started
            forwards, made = result.stats.forwards, len(result.tokens)
            best = min(best, elapsed / max(1, forwards))
        rows.append(PassCost(name, size, made, forwards, round(1e6 * best, 1)))
    return rows


def plain_tokens(tokenizer: Any, count: int = 512, seed: int = 0) -> list[int]:
    """``count`` random ids of ordinary (not special, not added) tokens, so the text is real text."""
    import random

    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    special |= {int(i) for i in getattr(tokenizer, "added_tokens_decoder", {}) or {}}
    pool = [i for i in range(len(tokenizer)) if i not in special]
    rng = random.Random(seed)
    return [rng.choice(pool) for _ in range(count)]


def engine_pass_costs(engine: Any, block_size: int, new_tokens: int = 256, repeats: int = 5) -> list[PassCost]:
    """``measure`` with an open engine's tokenizer, vocabulary, EOS and mask ids, and the engine's decoder."""
    from clovercode.engine.decoder import decode

    vocab = int(engine.model.config.get_text_config().vocab_size)
    mask = engine.plan(block_size=block_size).mask_id if block_size > 1 else engine.info.mask_token_id
    tokens = [t for t in plain_tokens(engine.tokenizer) if t < vocab]
    return measure(decode, engine.detokenize, engine.info.eos_ids, tokens, vocab, mask if mask is not None else 0,
                   block_size, new_tokens, repeats)


def _ignore(text: str) -> None:
    pass

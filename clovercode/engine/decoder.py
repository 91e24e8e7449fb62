"""The block-diffusion decoding loop (batch 1).

Each block of B positions starts as mask tokens. With the logit shift (position i is predicted from
the output at i - 1) the block's first token comes free from the previous commit's last logits; it
never changes on later passes, so it is taken at once. Then denoising passes run the model over the
block and accept positions by the strategy (threshold: every masked position with confidence ≥ the
threshold, and always the most confident one) until none is masked; one commit pass appends the
block to the committed state. The stop check runs on the final tokens (the committed output plus
the block's accepted leading run) before every pass and after every block: a stop found there ends
generation without more passes, and the last block is never committed because nothing reads it.
B = 1 with the shift is plain autoregressive decoding: one commit pass per token.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from clovercode.engine.constraint import Constraint
from clovercode.engine.denoiser import Denoiser, enter_scope
from clovercode.engine.block import Block
from clovercode.engine.sampler import pick, propose, select_ranked
from clovercode.engine.stops import Cut, Detokenize, StopScanner, Stops, safe_prefix


@dataclass(frozen=True)
class DecodePlan:
    """Resolved decoding settings (the model's metadata applied to an EngineConfig)."""

    block_size: int
    mask_id: int | None
    logit_shift: bool = True
    strategy: str = "threshold"
    threshold: float = 0.9
    top_k: int = 2
    steps: int = 8
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 4096
    cache_scope: str = ""  # the namespace the prompt is kept and reused in (CachedDenoiser.scope)

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError("block_size must be ≥ 1")
        if (self.block_size > 1 or not self.logit_shift) and self.mask_id is None:
            raise ValueError("block diffusion needs a mask token id")


@dataclass
class DecodeStats:
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens a kept prompt's cache supplied (not prefilled)
    new_tokens: int = 0
    denoise_passes: int = 0
    commits: int = 0
    blocks: int = 0
    remasked: int = 0  # accepted positions a grammar sent back to masked (constrained decoding)
    prefill_s: float = 0.0
    first_block_s: float | None = None  # from the start (prefill included) to the first finished block
    total_s: float = 0.0

    @property
    def forwards(self) -> int:
        """Forward passes after prefill: denoising and commit passes, all counted."""
        return self.denoise_passes + self.commits

    @property
    def tokens_per_forward(self) -> float:
        return self.new_tokens / self.forwards if self.forwards else float(self.new_tokens)

    @property
    def decode_s(self) -> float:
        return self.total_s - self.prefill_s

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.decode_s if self.decode_s > 0 else 0.0


@dataclass
class DecodeResult:
    tokens: list[int]
    text: str
    finish: str  # "stop" | "stop_string" | "length"
    stats: DecodeStats = field(default_factory=DecodeStats)


@dataclass(frozen=True)
class PassEvent:
    block: int
    index: int  # 0 is the free first token (logit shift), then one per denoising pass
    accepted: tuple[int, ...]  # block positions accepted in this pass


def decode(denoiser: Denoiser, prompt: Sequence[int], plan: DecodePlan, detok: Detokenize, stops: Stops,
           on_text: Callable[[str], None] | None = None, **kwargs: Any) -> DecodeResult:
    """Generate after ``prompt``; ``on_text`` receives the text of each block as it is committed."""
    for item in decode_stream(denoiser, prompt, plan, detok, stops, **kwargs):
        if isinstance(item, DecodeResult):
            return item
        if on_text is not None:
            on_text(item)
    raise AssertionError("decode_stream ended without a result")


def decode_stream(denoiser: Denoiser, prompt: Sequence[int], plan: DecodePlan, detok: Detokenize, stops: Stops,
                  on_pass: Callable[[PassEvent], None] | None = None, generator: Any = None,
                  clock: Callable[[], float] = time.perf_counter,
                  constraint: Constraint | None = None) -> Iterator[str | DecodeResult]:
    """Yield each committed block's new text as it is ready, then the DecodeResult.

    With a ``constraint`` (a grammar) the final tokens always form a valid grammar prefix: the first
    masked position chooses only among the tokens the grammar allows there, and the run of accepted
    positions that follows the final ones is validated before it becomes final; a position whose
    token the grammar forbids there goes back to masked (docs/engine.md, Constrained decoding).

    Host syncs (docs/engine.md, The pass loop): one read of the free first token per block, one
    read of the block per denoising pass; the grammar and ``on_pass`` add their own."""
    started = clock()
    stats = DecodeStats(prompt_tokens=len(prompt))
    enter_scope(denoiser, plan.cache_scope)
    state = denoiser.prefill(prompt)
    stats.cached_tokens = int(getattr(denoiser, "reused_tokens", 0) or 0)
    stats.prefill_s = clock() - started
    scanner = StopScanner(detok, stops, plan.max_new_tokens)
    size, offset = plan.block_size, 1 if plan.logit_shift else 0
    fill = plan.mask_id if plan.mask_id is not None else 0
    shown = ""
    cut: Cut | None = None
    while cut is None:
        block = None if size == offset else Block(size, fill, offset, state.last_logits.device)
        if offset:
            token, first = _first_token(state.last_logits, plan, generator, constraint)
            if block is not None:
                block.put_first(token)
            _notify(on_pass, stats.blocks, 0, [0])
            cut = scanner.extend([first])
        passes = 0
        while cut is None and block is not None and block.lead < size:
            logits = denoiser.denoise(state, block.tokens)
            stats.denoise_passes += 1
            start = block.lead
            proposed, confidence = _propose(block.rows(logits), plan, generator, constraint)
            count = _count(plan, block.remaining, passes)
            chosen = select_ranked(block.ranked(confidence), plan.strategy, threshold=plan.threshold, count=count)
            block.accept(proposed, chosen)
            block.remaining -= count
            values = block.read()
            end = values[size]
            if constraint is not None and end > start:
                valid = constraint.accept(values[start:end])
                if start + valid < end:
                    block.remask(start + valid)
                    stats.remasked += 1
                    end = start + valid
            passes += 1
            if on_pass is not None:
                _notify(on_pass, stats.blocks, passes, (chosen.nonzero().flatten() + start).tolist())
            if end > start:
                cut = scanner.extend(values[start:end])
            block.lead = end
        stats.blocks += 1
        if stats.first_block_s is None:
            stats.first_block_s = clock() - started
        if cut is None:
            state = denoiser.commit(state, token if block is None else block.tokens)
            stats.commits += 1
            visible = safe_prefix(scanner.text, stops)
            if len(visible) > len(shown) and visible.startswith(shown):
                yield visible[len(shown):]
                shown = visible
    if len(cut.text) > len(shown) and cut.text.startswith(shown):
        yield cut.text[len(shown):]
    stats.new_tokens = len(cut.tokens)
    stats.total_s = clock() - started
    yield DecodeResult(cut.tokens, cut.text, cut.reason, stats)


def _first_token(last_logits: Any, plan: DecodePlan, generator: Any, constraint: Constraint | None) -> tuple[Any, int]:
    """The block's first token from the last commit's logits ((1,) ids on their device, and the id):
    final at once, so a grammar consumes it, choosing among the allowed tokens if it forbids the model's."""
    token = pick(last_logits[None], plan.temperature, plan.top_p, generator)
    first = token.item()
    if constraint is not None and constraint.accept([first]) != 1:
        token, _ = propose(last_logits[None], plan.temperature, plan.top_p, generator, {0: constraint.allowed()})
        first = int(token[0])
        constraint.accept([first])
    return token, first


def _count(plan: DecodePlan, remaining: int, passes: int) -> int:
    """How many positions topk and steps accept this pass (threshold decides on the device: 0 here)."""
    if plan.strategy == "topk":
        return min(plan.top_k, remaining)
    if plan.strategy == "steps":
        left = plan.steps - passes
        return remaining if left <= 1 else math.ceil(remaining / left)
    return 0


def _propose(predicted: Any, plan: DecodePlan, generator: Any, constraint: Constraint | None) -> tuple[Any, Any]:
    """Tokens and confidences for every row (positions from the first masked one on); with a
    constraint, the first row only gets a token its grammar allows. The model's own choice is
    checked first and the full mask is computed only when that choice is forbidden: checking one
    token costs microseconds, a mask over a large vocabulary up to milliseconds. Greedy, the result
    is the masked argmax either way; sampled, a redraw from the masked distribution after a rejected
    draw is exactly a draw from it. Without a constraint nothing here leaves the device."""
    tokens, confidence = propose(predicted, plan.temperature, plan.top_p, generator)
    if constraint is not None and not constraint.permits(int(tokens[0])):
        fixed, sure = propose(predicted[:1], plan.temperature, plan.top_p, generator, {0: constraint.allowed()})
        tokens[0], confidence[0] = fixed[0], sure[0]
    return tokens, confidence


def _notify(on_pass: Callable[[PassEvent], None] | None, block: int, index: int, accepted: list[int]) -> None:
    if on_pass is not None:
        on_pass(PassEvent(block, index, tuple(accepted)))

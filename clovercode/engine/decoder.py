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

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from clovercode.engine.constraint import Constraint
from clovercode.engine.denoiser import Denoiser
from clovercode.engine.sampler import propose, select
from clovercode.engine.stops import Cut, Detokenize, Stops, find_stop, safe_prefix


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

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError("block_size must be ≥ 1")
        if (self.block_size > 1 or not self.logit_shift) and self.mask_id is None:
            raise ValueError("block diffusion needs a mask token id")


@dataclass
class DecodeStats:
    prompt_tokens: int = 0
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
    token the grammar forbids there goes back to masked (docs/engine.md, Constrained decoding)."""
    started = clock()
    stats = DecodeStats(prompt_tokens=len(prompt))
    state = denoiser.prefill(prompt)
    stats.prefill_s = clock() - started
    out: list[int] = []
    shown = ""
    cut: Cut | None = None
    checked = -1  # how many final tokens the last stop check saw: the same ones cannot stop twice
    while cut is None:
        block, masked = _new_block(plan)
        if plan.logit_shift:
            token, _ = propose(state.last_logits[None], plan.temperature, plan.top_p, generator)
            if constraint is not None and constraint.accept([int(token[0])]) != 1:  # final at once: consumed if allowed
                token, _ = propose(state.last_logits[None], plan.temperature, plan.top_p, generator,
                                   {0: constraint.allowed()})
                constraint.accept([int(token[0])])
            block[0], masked[0] = token[0], False
            _notify(on_pass, stats.blocks, 0, [0])
        passes = 0
        while bool(masked.any()):
            final = out + _leading(block, masked)
            if len(final) > checked:  # a pass that accepted no leading position left nothing new to check
                checked = len(final)
                cut = find_stop(final, detok, stops, plan.max_new_tokens)
                if cut is not None:
                    break
            logits = denoiser.denoise(state, block)
            stats.denoise_passes += 1
            predicted = _shifted(state.last_logits, logits) if plan.logit_shift else logits
            lead = _first_masked(masked)
            tokens, confidence = _propose(predicted, plan, generator, constraint, lead)
            chosen = select(confidence, masked, plan.strategy, threshold=plan.threshold, top_k=plan.top_k,
                            passes_left=plan.steps - passes)
            block[chosen] = tokens[chosen]
            masked &= ~chosen
            if constraint is not None:
                stats.remasked += _advance(constraint, block, masked, lead, plan.mask_id)
            passes += 1
            _notify(on_pass, stats.blocks, passes, chosen.nonzero().flatten().tolist())
        stats.blocks += 1
        if stats.first_block_s is None:
            stats.first_block_s = clock() - started
        if cut is None:
            cut = find_stop(out + block.tolist(), detok, stops, plan.max_new_tokens)
        if cut is None:
            state = denoiser.commit(state, block)
            stats.commits += 1
            out += block.tolist()
            visible = safe_prefix(detok(out), stops)
            if len(visible) > len(shown) and visible.startswith(shown):
                yield visible[len(shown):]
                shown = visible
    if len(cut.text) > len(shown) and cut.text.startswith(shown):
        yield cut.text[len(shown):]
    stats.new_tokens = len(cut.tokens)
    stats.total_s = clock() - started
    yield DecodeResult(cut.tokens, cut.text, cut.reason, stats)


def _new_block(plan: DecodePlan) -> tuple[Any, Any]:
    import torch

    fill = plan.mask_id if plan.mask_id is not None else 0
    return (torch.full((plan.block_size,), fill, dtype=torch.long),
            torch.ones(plan.block_size, dtype=torch.bool))


def _shifted(last_logits: Any, logits: Any) -> Any:
    """Row i predicts block position i: row 0 from the committed state, row i from block output i - 1."""
    import torch

    return torch.cat([last_logits[None].to(logits.dtype), logits[:-1]], dim=0)


def _propose(predicted: Any, plan: DecodePlan, generator: Any, constraint: Constraint | None, row: int) -> tuple[Any, Any]:
    """Tokens and confidences for every row; with a constraint, ``row`` (the first masked position)
    only gets a token its grammar allows. The model's own choice is checked first and the full mask
    is computed only when that choice is forbidden: checking one token costs microseconds, a mask
    over a large vocabulary up to milliseconds. Greedy, the result is the masked argmax either way;
    sampled, a redraw from the masked distribution after a rejected draw is exactly a draw from it."""
    tokens, confidence = (t.cpu() for t in propose(predicted, plan.temperature, plan.top_p, generator))
    if constraint is not None and row < len(tokens) and not constraint.permits(int(tokens[row])):
        fixed, sure = propose(predicted[row:row + 1], plan.temperature, plan.top_p, generator, {0: constraint.allowed()})
        tokens[row], confidence[row] = fixed[0].cpu(), sure[0].cpu()
    return tokens, confidence


def _first_masked(masked: Any) -> int:
    return int(masked.int().argmax()) if bool(masked.any()) else len(masked)


def _advance(constraint: Constraint, block: Any, masked: Any, lead: int, mask_id: int | None) -> int:
    """Make the accepted run from ``lead`` (the first position that was masked) final as far as the
    grammar allows; the first position it forbids goes back to masked. Positions past a masked gap
    stay as they are: they are checked when the run reaches them. Returns 1 if a position went back."""
    end = _first_masked(masked)
    if end <= lead:
        return 0
    valid = constraint.accept(block[lead:end].tolist())
    if lead + valid >= end:
        return 0
    block[lead + valid] = mask_id if mask_id is not None else 0
    masked[lead + valid] = True
    return 1


def _leading(block: Any, masked: Any) -> list[int]:
    """The block's accepted tokens up to its first masked position (these are final)."""
    first = int(masked.int().argmax()) if bool(masked.any()) else len(block)
    return block[:first].tolist()


def _notify(on_pass: Callable[[PassEvent], None] | None, block: int, index: int, accepted: list[int]) -> None:
    if on_pass is not None:
        on_pass(PassEvent(block, index, tuple(accepted)))

"""Block-diffusion decoding of many requests at once, with continuous batching.

Requests join (``add``: their prompt is prefilled into a slot of a ``BatchDenoiser``) and leave
(``remove``, or when they finish) between steps. A ``step`` is ONE forward over every active request:
each row is at its own block position, and is either a denoising row (its block still has masked
positions) or a committing row (its block is finished). After the forward every row goes on exactly as
``decoder.decode_stream`` would go on alone: acceptance by its own strategy (threshold / topk / steps,
decided for all denoising rows with tensor ops), the free first token of its next block (logit shift),
its own stop checks, token limit and sampling generator. So the greedy output of a request decoded in a
batch is the output it gets alone (``decode_stream`` is the spec; tests/test_batch_decode.py checks it).

Items come out of ``step`` tagged with the request's key: each committed block's new text (``str``),
then the ``DecodeResult``, after which the request is gone and its slot free.

A request may carry a grammar (``Request.constraint``, engine/constraint.py): its row keeps its own
matcher and is checked on the host after the shared forward exactly where ``decode_stream`` checks it
alone (the block's free first token, the first masked position of each pass, the accepted run that
follows the final tokens), so rows with and without grammars decode together and a constrained row's
greedy output is the one it gets alone. A row's grammar work is one token check per pass (a full mask
only when the model's choice is forbidden); the others wait for nothing else (``grammar_s`` counts it).

Stop checks look at the new final tokens only (``stops.StopScanner``, as in ``decode_stream``): the output is detokenized in full only
when something may have stopped it. Streamed text detokenizes the output once per committed block,
as ``decode_stream`` does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from clovercode.engine.batchseam import BatchDenoiser, Row
from clovercode.engine.decoder import DecodePlan, DecodeResult, DecodeStats
from clovercode.engine.denoiser import enter_scope
from clovercode.engine.sampler import propose
from clovercode.engine.stops import Cut, Detokenize, StopScanner, Stops, safe_prefix

STRATEGY_CODES = {"threshold": 0, "topk": 1, "steps": 2}
Item = tuple[str, "str | DecodeResult"]


@dataclass(frozen=True)
class Request:
    """One request to decode: ``generator`` is its own torch.Generator when it samples."""

    key: str
    prompt: Sequence[int]
    plan: DecodePlan
    stops: Stops
    generator: Any = None
    constraint: Any = None  # an engine.constraint.Constraint: the row's output follows its grammar


@dataclass
class _Sequence:
    key: str
    slot: int
    plan: DecodePlan
    stops: Stops
    watch: StopScanner  # the stop check decode_stream uses, fed the new final tokens only
    generator: Any
    started: float
    last_logits: Any  # (V,): predicts the next block's first token
    stats: DecodeStats
    block: Any = None  # (L,) long, mask tokens where not yet accepted
    masked: Any = None  # (L,) bool
    passes: int = 0  # denoising passes over the current block
    commit: bool = False  # the block is finished: the next forward commits it
    out: list[int] = field(default_factory=list)
    shown: str = ""
    constraint: Any = None
    fed: int = 0  # positions of the current block the constraint has consumed (final)


class BatchDecoder:
    def __init__(self, denoiser: BatchDenoiser, detok: Detokenize, clock: Callable[[], float] = time.perf_counter):
        self.denoiser, self.detok, self.clock = denoiser, detok, clock
        self.active: dict[str, _Sequence] = {}
        self._items: list[Item] = []  # produced since the last step (a request may end at admission)
        self.grammar_s = 0.0  # host time spent on constraints, summed (bench: its share of a pass)
        self.forward_s = 0.0  # time in the denoiser's forward, summed (on a GPU: until the launch returns)
        self.prefill_s = 0.0  # time admitting prompts (their prefills), summed

    def __len__(self) -> int:
        return len(self.active)

    def add(self, key: str, prompt: Sequence[int], plan: DecodePlan, stops: Stops, generator: Any = None) -> None:
        """Prefill ``prompt`` and open its first block; it joins the next step. ``generator``: the
        request's own torch.Generator when it samples (its draws are the ones it makes alone)."""
        self.add_many([Request(key, prompt, plan, stops, generator)])

    def add_many(self, requests: Sequence[Request]) -> None:
        """``add`` for several requests, their prompts prefilled together (``BatchDenoiser.admit_many``:
        one forward where the denoiser can). All are checked before any is admitted; if the prefill
        fails, none has joined."""
        keys = [r.key for r in requests]
        twice = next((k for i, k in enumerate(keys) if k in self.active or k in keys[:i]), None)
        if twice is not None:
            raise ValueError(f"request {twice!r} is already being decoded")
        other = next(iter(self.active.values()), None)
        size = other.plan.block_size if other is not None else requests[0].plan.block_size if requests else 0
        for r in requests:
            if r.plan.strategy not in STRATEGY_CODES:
                raise ValueError(f"unknown strategy {r.plan.strategy!r}")
            if r.plan.block_size != size:
                raise ValueError(f"block size {r.plan.block_size} differs from the batch's {size}: "
                                 "one forward needs blocks of one length")
        if not requests:
            return
        started = self.clock()
        admitted = self._admit_by_scope(requests)
        prefill_s = self.clock() - started  # a shared prefill: each waited for all of it
        self.prefill_s += prefill_s
        seqs = []
        cached = getattr(self.denoiser, "cached", {})  # slot → prompt tokens a kept prompt supplied
        for r, (slot, last) in zip(requests, admitted):
            stats = DecodeStats(prompt_tokens=len(r.prompt), prefill_s=prefill_s, cached_tokens=cached.get(slot, 0))
            seq = _Sequence(r.key, slot, r.plan, r.stops, StopScanner(self.detok, r.stops, r.plan.max_new_tokens),
                            r.generator, started, last, stats, constraint=r.constraint)
            self.active[r.key] = seq
            seqs.append(seq)
        self._open_blocks(seqs)

    def _admit_by_scope(self, requests: Sequence[Request]) -> list[tuple[int, Any]]:
        """``admit_many`` per prompt-cache scope (DecodePlan.cache_scope), in the requests' order: a
        prompt is kept and reused only within its own scope. All are admitted, or none."""
        scopes = list(dict.fromkeys(r.plan.cache_scope for r in requests))
        if len(scopes) == 1:
            enter_scope(self.denoiser, scopes[0])
            return self.denoiser.admit_many([r.prompt for r in requests])
        by_index: dict[int, tuple[int, Any]] = {}
        try:
            for scope in scopes:
                group = [i for i, r in enumerate(requests) if r.plan.cache_scope == scope]
                enter_scope(self.denoiser, scope)
                by_index.update(zip(group, self.denoiser.admit_many([requests[i].prompt for i in group])))
        except BaseException:
            for slot, _ in by_index.values():
                self.denoiser.release(slot)
            raise
        return [by_index[i] for i in range(len(requests))]

    def remove(self, key: str) -> None:
        """Drop a request now (its client left); unknown keys are ignored."""
        seq = self.active.pop(key, None)
        if seq is not None:
            self.denoiser.release(seq.slot)
        self._items = [item for item in self._items if item[0] != key]

    def step(self) -> list[Item]:
        """One forward over every active request; what each produced, tagged with its key."""
        seqs = list(self.active.values())
        if seqs:
            started = self.clock()
            logits = self.denoiser.forward([Row(s.slot, s.block, s.commit, _read(s)) for s in seqs])  # (R, L, V)
            self.forward_s += self.clock() - started
            denoised = [i for i, s in enumerate(seqs) if not s.commit]
            committed = [i for i, s in enumerate(seqs) if s.commit]
            if denoised:
                self._accept([seqs[i] for i in denoised], logits if len(denoised) == len(seqs) else logits[denoised])
            for i in committed:
                self._committed(seqs[i], logits[i, -1])
            self._open_blocks([seqs[i] for i in committed])
        items, self._items = self._items, []
        return items

    # ---- one request's progress ------------------------------------------------------------

    def _accept(self, seqs: list[_Sequence], logits: Any) -> None:
        """Acceptance for every denoising row at once, each by its own plan (``decode_stream``'s pass)."""
        import torch

        tokens, confidence = self._propose(seqs, logits)
        if any(s.constraint is not None for s in seqs):
            self._first_allowed(seqs, logits, tokens, confidence)
        masked = torch.stack([s.masked for s in seqs])
        chosen = select_rows(confidence, masked, [s.plan for s in seqs], [s.passes for s in seqs])
        blocks = torch.where(chosen, tokens, torch.stack([s.block for s in seqs]))
        masked &= ~chosen
        for i, seq in enumerate(seqs):
            seq.block, seq.masked = blocks[i], masked[i]  # views: a grammar's remask below writes through
            seq.passes += 1
            seq.stats.denoise_passes += 1
            if seq.constraint is not None:
                self._feed(seq)
        # every row's final tokens read from the host at once (a few tensor calls per row saved per pass)
        left = masked.any(dim=1)
        first = torch.where(left, masked.int().argmax(dim=1), masked.shape[1]).tolist()
        for seq, more, row, end in zip(seqs, left.tolist(), blocks.tolist(), first):
            self._settle(seq, more, row[:end])

    def _first_allowed(self, seqs: list[_Sequence], logits: Any, tokens: Any, confidence: Any) -> None:
        """``decode_stream``'s ``_propose`` check for each constrained row: its first masked position
        gets a token its grammar allows (the model's own when allowed; else the masked choice from
        the same logits row, with the model's probability of it as its confidence)."""
        started = self.clock()
        for i, seq in enumerate(seqs):
            if seq.constraint is None:
                continue
            lead = int(seq.masked.int().argmax())
            if seq.constraint.permits(int(tokens[i, lead])):
                continue
            source = lead - 1 if seq.plan.logit_shift else lead
            row = logits[i, source] if source >= 0 else seq.last_logits.to(logits.device, logits.dtype)
            fixed, sure = propose(row[None], seq.plan.temperature, seq.plan.top_p, seq.generator,
                                  {0: seq.constraint.allowed()})
            tokens[i, lead], confidence[i, lead] = int(fixed[0]), float(sure[0])
        self.grammar_s += self.clock() - started

    def _feed(self, seq: _Sequence) -> None:
        """The run accepted after the final tokens goes to the grammar; the first token it forbids goes
        back to masked (as ``decode_stream`` does), so the final tokens always form a grammar prefix."""
        started = self.clock()
        start = seq.fed
        end = int(seq.masked.int().argmax()) if bool(seq.masked.any()) else len(seq.block)
        if end > start:
            valid = seq.constraint.accept(seq.block[start:end].tolist())
            if start + valid < end:
                seq.block[start + valid] = seq.plan.mask_id if seq.plan.mask_id is not None else 0
                seq.masked[start + valid] = True
                seq.stats.remasked += 1
                end = start + valid
            seq.fed = end
        self.grammar_s += self.clock() - started

    def _propose(self, seqs: list[_Sequence], logits: Any) -> tuple[Any, Any]:
        """Tokens and confidences (R, L) on the host for the (R, L, V) logits of a denoising forward.

        With the logit shift block position i is predicted by output i - 1 (position 0 by the last
        commit: it is the free token, never masked in a denoising pass). Greedy rows are proposed in one
        call over the logits as they are, the results shifted by one position (no copy of the logits);
        a sampled row gets exactly the rows ``decode_stream`` draws from (its first masked position
        on), with its own generator, so it draws what it draws alone."""
        import torch

        rows, size, vocab = logits.shape
        greedy = [i for i, s in enumerate(seqs) if s.plan.temperature <= 0]
        tokens = torch.zeros(rows, size, dtype=torch.long)
        confidence = torch.zeros(rows, size, dtype=torch.float32)
        if greedy:
            part = logits if len(greedy) == rows else logits[greedy]
            # only the outputs that predict a masked position are read (the others' logits were never
            # computed: _read); each row's softmax is its own, so a subset gives the same values
            read = torch.stack([_read(seqs[i]) for i in greedy]).view(-1).nonzero().view(-1)
            t, c = propose(part.reshape(-1, vocab).index_select(0, read.to(part.device)))
            t = torch.zeros(len(greedy) * size, dtype=torch.long).index_copy_(0, read, t.cpu()).view(-1, size)
            c = torch.zeros(len(greedy) * size, dtype=c.dtype).index_copy_(0, read, c.cpu()).view(-1, size)
            shift = torch.tensor([seqs[i].plan.logit_shift for i in greedy])[:, None]
            t = torch.where(shift, torch.cat([torch.zeros_like(t[:, :1]), t[:, :-1]], dim=1), t)
            c = torch.where(shift, torch.cat([torch.zeros_like(c[:, :1]), c[:, :-1]], dim=1), c)
            tokens[greedy], confidence[greedy] = t, c.to(torch.float32)
        for i, seq in enumerate(seqs):
            if seq.plan.temperature > 0:
                predicted = logits[i]
                if seq.plan.logit_shift:
                    predicted = torch.cat([seq.last_logits[None].to(logits.device, logits.dtype), logits[i, :-1]])
                lead = int(seq.masked.int().argmax())  # decode_stream draws only from the first masked position on
                t, c = propose(predicted[lead:], seq.plan.temperature, seq.plan.top_p, seq.generator)
                tokens[i, lead:], confidence[i, lead:] = t.cpu(), c.cpu()
        return tokens, confidence

    def _committed(self, seq: _Sequence, last_logits: Any) -> None:
        seq.last_logits = last_logits
        seq.stats.commits += 1
        seq.out += seq.block.tolist()
        visible = safe_prefix(seq.watch.text, seq.stops)
        if len(visible) > len(seq.shown) and visible.startswith(seq.shown):
            self._items.append((seq.key, visible[len(seq.shown):]))
            seq.shown = visible

    def _open_blocks(self, seqs: list[_Sequence]) -> None:
        """A fresh masked block for each; with the logit shift its first token comes free now."""
        import torch

        for seq in seqs:
            fill = seq.plan.mask_id if seq.plan.mask_id is not None else 0
            seq.block = torch.full((seq.plan.block_size,), fill, dtype=torch.long)
            seq.masked = torch.ones(seq.plan.block_size, dtype=torch.bool)
            seq.passes = 0
        shifted = [s for s in seqs if s.plan.logit_shift]
        greedy = [s for s in shifted if s.plan.temperature <= 0]
        if greedy:
            tokens, _ = propose(torch.stack([s.last_logits for s in greedy]))
            for seq, token in zip(greedy, tokens.tolist()):
                seq.block[0], seq.masked[0] = token, False
        for seq in shifted:
            if seq.plan.temperature > 0:
                token, _ = propose(seq.last_logits[None], seq.plan.temperature, seq.plan.top_p, seq.generator)
                seq.block[0], seq.masked[0] = int(token[0]), False
        for seq in seqs:
            seq.fed = 0
            if seq.constraint is not None and seq.plan.logit_shift:
                self._first_token_allowed(seq)
            self._settle(seq)

    def _first_token_allowed(self, seq: _Sequence) -> None:
        """``decode_stream``'s ``_first_token``: the free first token is final at once, so the grammar
        consumes it; one it forbids is replaced by the masked choice from the same logits."""
        started = self.clock()
        if seq.constraint.accept([int(seq.block[0])]) != 1:
            token, _ = propose(seq.last_logits[None], seq.plan.temperature, seq.plan.top_p, seq.generator,
                               {0: seq.constraint.allowed()})
            seq.block[0] = int(token[0])
            seq.constraint.accept([int(token[0])])
        seq.fed = 1
        self.grammar_s += self.clock() - started

    def _settle(self, seq: _Sequence, more: bool | None = None, final: list[int] | None = None) -> None:
        """After a pass (or a fresh block): stop on the final tokens, else say what the next forward does.
        ``more`` (the block still has masked positions) and ``final`` (its tokens before the first
        masked one) when the caller has read them already."""
        if more is None:
            more = bool(seq.masked.any())
            final = _leading(seq.block, seq.masked)
        if more:
            cut = _check(seq, seq.out + final)
            if cut is None:
                seq.commit = False
                return
            self._block_done(seq)
        else:
            self._block_done(seq)
            cut = _check(seq, seq.out + final)
            if cut is None:
                seq.commit = True
                return
        self._finish(seq, cut)

    def _block_done(self, seq: _Sequence) -> None:
        seq.stats.blocks += 1
        if seq.stats.first_block_s is None:
            seq.stats.first_block_s = self.clock() - seq.started

    def _finish(self, seq: _Sequence, cut: Cut) -> None:
        if len(cut.text) > len(seq.shown) and cut.text.startswith(seq.shown):
            self._items.append((seq.key, cut.text[len(seq.shown):]))
        seq.stats.new_tokens = len(cut.tokens)
        seq.stats.total_s = self.clock() - seq.started
        self._items.append((seq.key, DecodeResult(cut.tokens, cut.text, cut.reason, seq.stats)))
        del self.active[seq.key]
        self.denoiser.release(seq.slot)


def _read(seq: _Sequence) -> Any:
    """The positions of the forward's output this request reads: a committing row its last (what
    predicts the next block's first token); a greedy denoising row those that predict a masked
    position (with the logit shift, position i is predicted by output i - 1); a sampled row all of
    them (it draws from every position from its first masked one on, as it does alone)."""
    import torch

    if seq.commit:
        keep = torch.zeros_like(seq.masked)
        keep[-1] = True
        return keep
    if seq.plan.temperature > 0:
        return None
    if seq.plan.logit_shift:
        return torch.cat([seq.masked[1:], seq.masked.new_zeros(1)])
    return seq.masked


def _check(seq: _Sequence, final: list[int]) -> Cut | None:
    """The stop check on the final tokens so far (they only grow): the scanner reads the new ones."""
    return seq.watch.extend(final[len(seq.watch.tokens):])


def select_rows(confidence: Any, masked: Any, plans: Sequence[DecodePlan], passes: Sequence[int]) -> Any:
    """``sampler.select`` for R rows at once, each with its own plan: (R, L) confidences and masks →
    (R, L) bool of the positions to accept. Same rule: threshold accepts every masked position at least
    that confident, else the most confident one; topk the ``top_k`` most confident; steps the most
    confident ceil(remaining / passes left); ties to the leftmost."""
    import torch

    rows, size = masked.shape
    # The threshold in the confidences' dtype: ``select`` compares with a Python float, which torch
    # casts to the tensor's dtype, and a float64 threshold would move the boundary.
    threshold = torch.tensor([p.threshold for p in plans], dtype=confidence.dtype)
    if all(p.strategy == "threshold" for p in plans):  # the usual batch: no sort needed
        over = masked & (confidence >= threshold[:, None])
        # a row with none over the threshold takes its most confident masked position, the leftmost
        # of equals (argmax returns the first maximum, as the stable sort below ranks it first)
        best = torch.where(masked, confidence.float(), torch.full_like(confidence, -1.0, dtype=torch.float)).argmax(dim=1)
        alone = ~over.any(dim=1) & masked.any(dim=1)
        return over | (torch.nn.functional.one_hot(best, size).bool() & alone[:, None])
    kind = torch.tensor([STRATEGY_CODES[p.strategy] for p in plans])
    top_k = torch.tensor([p.top_k for p in plans])
    left = torch.tensor([p.steps - n for p, n in zip(plans, passes)]).clamp(min=1)
    remaining = masked.sum(dim=1)
    over = masked & (confidence >= threshold[:, None]) & (kind == 0)[:, None]
    count = torch.where(kind == 0, (~over.any(dim=1)).long(),
                        torch.where(kind == 1, torch.minimum(top_k, remaining),
                                    torch.where(left <= 1, remaining, (remaining + left - 1) // left)))
    count = torch.where(remaining > 0, count, torch.zeros_like(count))
    ranked = torch.where(masked, confidence.float(), torch.full_like(confidence, -1.0, dtype=torch.float))
    order = torch.sort(ranked, dim=1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(size).expand(rows, size).contiguous())
    return over | (rank < count[:, None])


def _leading(block: Any, masked: Any) -> list[int]:
    """The block's accepted tokens up to its first masked position (these are final)."""
    first = int(masked.int().argmax()) if bool(masked.any()) else len(block)
    return block[:first].tolist()

"""The block loop with a deterministic denoiser whose confidences the test controls."""

import math
import random
from types import SimpleNamespace

import torch

from clovercode.engine.decoder import DecodePlan, decode
from clovercode.engine.stops import Stops

LETTERS = "abcdefghijklmnopqrstuvwxyz<>/_ "
VOCAB = len(LETTERS) + 2
EOS, MASK = VOCAB - 2, VOCAB - 1


def detok(ids):
    return "".join(LETTERS[i] if i < len(LETTERS) else "" for i in ids)


def ids_of(text):
    return [LETTERS.index(c) for c in text]


def logits_for(token, confidence):
    """A distribution whose argmax is ``token`` with probability ``confidence``."""
    probs = torch.full((VOCAB,), (1 - confidence) / (VOCAB - 1))
    probs[token] = confidence
    return torch.log(probs)


class Scripted:
    """Predicts ``target`` at every position (logit shift: block row i predicts position i + 1);
    ``confidence(block, pass, position)`` says how sure it is."""

    def __init__(self, target, confidence):
        self.target, self.confidence = target, confidence
        self.blocks = self.passes = self.commits = 0
        self.prompt_len = 0
        self.seen_blocks = []

    def _row(self, absolute, block, step, position):
        token = self.target[absolute] if absolute < len(self.target) else EOS
        return logits_for(token, self.confidence(block, step, position))

    def prefill(self, ids):
        self.prompt_len = len(ids)
        return SimpleNamespace(length=0, last_logits=self._row(0, 0, 0, 0))

    def denoise(self, state, block):
        self.passes += 1
        self.seen_blocks.append(block.clone())
        size = len(block)
        rows = [self._row(state.length + i + 1, self.blocks, self.passes, i + 1) for i in range(size)]
        return torch.stack(rows)

    def commit(self, state, block):
        self.commits += 1
        self.blocks += 1
        self.passes = 0
        state.length += len(block)
        state.last_logits = self._row(state.length, self.blocks, 0, 0)
        return state


def run(denoiser, plan, stops=Stops(frozenset({EOS}))):
    events, deltas = [], []
    result = decode(denoiser, [1, 2, 3], plan, detok, stops, on_text=deltas.append, on_pass=events.append)
    return result, events, deltas


def plan(**kw):
    base = dict(block_size=8, mask_id=MASK, strategy="threshold", threshold=0.9, max_new_tokens=64)
    base.update(kw)
    return DecodePlan(**base)


def test_threshold_accepts_exactly_the_expected_positions_each_pass():
    target = ids_of("abcdefghijklmnop")
    table = {1: {2: 0.95, 5: 0.99}, 2: {3: 0.8}}  # pass 1: two sure positions; pass 2: none sure, 3 is best

    def confidence(block, step, position):
        return table.get(step, {}).get(position, 0.97 if step >= 3 else 0.5)

    denoiser = Scripted(target, confidence)
    result, events, _ = run(denoiser, plan(max_new_tokens=8))
    first = [e.accepted for e in events if e.block == 0]
    assert first[0] == (0,)  # the free first token, from the commit logits
    assert first[1] == (2, 5)
    assert first[2] == (3,)
    assert first[3] == (1, 4, 6, 7)
    assert result.tokens == target[:8]


def test_always_one_per_pass_and_termination_within_b_passes():
    rng = random.Random(3)
    target = [rng.randrange(26) for _ in range(40)]
    denoiser = Scripted(target, lambda b, s, p: 0.2)  # never confident: one position per pass
    result, events, _ = run(denoiser, plan(max_new_tokens=40))
    assert result.tokens == target
    for block in range(5):
        passes = [e for e in events if e.block == block]
        assert len(passes) == 8  # the free token + 7 passes of exactly one
        assert all(len(e.accepted) == 1 for e in passes)
        assert [e.accepted[0] for e in passes] == list(range(8))  # ties go leftmost


def test_random_confidences_terminate_and_count_every_forward():
    rng = random.Random(0)
    target = [rng.randrange(26) for _ in range(64)]
    denoiser = Scripted(target, lambda b, s, p: rng.random())
    result, events, _ = run(denoiser, plan(block_size=16, max_new_tokens=64))
    assert result.tokens == target
    per_block = {}
    for event in events:
        per_block[event.block] = per_block.get(event.block, 0) + 1
    assert all(count <= 16 for count in per_block.values())
    stats = result.stats
    assert stats.forwards == stats.denoise_passes + stats.commits
    assert stats.commits == 3  # the fourth block ends the output: never committed
    assert math.isclose(stats.tokens_per_forward, 64 / stats.forwards)


def test_topk_and_steps_strategies():
    target = ids_of("abcdefghijklmnop")
    denoiser = Scripted(target, lambda b, s, p: 0.5)
    _, events, _ = run(denoiser, plan(strategy="topk", top_k=3, max_new_tokens=8))
    assert [len(e.accepted) for e in events] == [1, 3, 3, 1]
    denoiser = Scripted(target, lambda b, s, p: 0.5)
    _, events, _ = run(denoiser, plan(strategy="steps", steps=2, max_new_tokens=8))
    assert [len(e.accepted) for e in events] == [1, 4, 3]


def test_eos_stops_inside_a_block_without_more_passes_or_a_commit():
    target = ids_of("abcdefghijk") + [EOS] + ids_of("zzzz")
    denoiser = Scripted(target, lambda b, s, p: 0.99)
    result, _, deltas = run(denoiser, plan())
    assert result.text == "abcdefghijk"
    assert result.finish == "stop"
    assert denoiser.commits == 1 and result.stats.blocks == 2
    assert "".join(deltas) == result.text


def test_stop_string_trims_exactly_and_keeps_the_string():
    text = "abc<tool>x</tool>zzzzzzzzzzzzzzzzz"
    denoiser = Scripted(ids_of(text), lambda b, s, p: 0.99)
    result, _, deltas = run(denoiser, plan(), Stops(frozenset({EOS}), ("</tool>",)))
    assert result.text == "abc<tool>x</tool>"
    assert result.finish == "stop_string"
    assert "".join(deltas) == result.text
    dropped, _, _ = run(Scripted(ids_of(text), lambda b, s, p: 0.99), plan(),
                        Stops(frozenset({EOS}), ("</tool>",), keep_string=False))
    assert dropped.text == "abc<tool>x"


def test_streams_one_delta_per_committed_block():
    target = ids_of("abcdefghijklmnopqrstuvwx") + [EOS]
    denoiser = Scripted(target, lambda b, s, p: 0.99)
    result, _, deltas = run(denoiser, plan())
    assert deltas == ["abcdefgh", "ijklmnop", "qrstuvwx"]
    assert result.text == "".join(deltas)


def test_max_tokens_trims_and_reports_length():
    denoiser = Scripted(ids_of("abcdefghijklmnopqrstuvwxyz"), lambda b, s, p: 0.99)
    result, _, _ = run(denoiser, plan(max_new_tokens=11))
    assert result.tokens == ids_of("abcdefghijk")
    assert result.finish == "length"


def test_block_size_one_with_shift_is_one_commit_per_token():
    denoiser = Scripted(ids_of("abcde") + [EOS], lambda b, s, p: 0.3)
    result, _, _ = run(denoiser, plan(block_size=1))
    assert result.text == "abcde"
    assert result.stats.denoise_passes == 0
    assert result.stats.commits == 5
    assert result.stats.tokens_per_forward == 1.0


def test_denoise_sees_masks_only_where_nothing_was_accepted():
    target = ids_of("abcdefgh")
    denoiser = Scripted(target, lambda b, s, p: 0.95 if p % 2 else 0.1)
    run(denoiser, plan(max_new_tokens=8))
    first_pass = denoiser.seen_blocks[0]
    assert int(first_pass[0]) == target[0]  # the free first token is in place before any pass
    assert (first_pass[1:] == MASK).all()
    second = denoiser.seen_blocks[1]
    assert [int(t) for t in second[1::2]] == target[1::2]  # accepted odd positions are real tokens now


def test_the_stop_check_runs_only_when_final_tokens_were_added():
    """Before each pass the stop check detokenizes the whole output; a pass that accepted no position
    of the block's leading run added no final token, so the next check would repeat the last one."""
    target = ids_of("abcdefghijklmnop")
    table = {1: {2: 0.95, 5: 0.99}, 2: {3: 0.8}}  # passes 1 and 2 leave position 1 masked

    def confidence(block, step, position):
        return table.get(step, {}).get(position, 0.97 if step >= 3 else 0.5)

    seen = []

    def counting(ids):
        seen.append(list(ids))
        return detok(ids)

    result = decode(Scripted(target, confidence), [1, 2, 3], plan(max_new_tokens=8), counting, Stops(frozenset({EOS})))
    assert result.tokens == target[:8]
    assert all(a != b for a, b in zip(seen, seen[1:])), "the same tokens were checked twice in a row"

"""Prompt reuse in the batched denoiser: a conversation's next turn, admitted into a batch, prefills only
the tokens its prompt adds to the last turn's prompt (as the batch-1 path does), whether the last turn
was admitted alone or together with others, and every row still gives the batch-1 logits."""

import random

import pytest
import torch
from tinymodels import VOCAB, tiny_hybrid, tiny_llama, tiny_qwen3

from clovercode.engine.batchcache import UnsupportedCache
from clovercode.engine.batchdenoiser import SlotBatchDenoiser
from clovercode.engine.batchseam import Row
from clovercode.engine.denoiser import CachedDenoiser

TIGHT = 1e-9  # float64 attention-only models
HYBRID = 1e-4  # the reference Gated DeltaNet kernel runs in float32 and chunks differently


class ForwardLengths:
    """The number of input positions of every model forward (how much a prefill really ran)."""

    def __init__(self, model):
        self.lengths = []
        right = model.forward

        def counting(*args, **kwargs):
            self.lengths.append(int(kwargs["input_ids"].shape[-1]))
            return right(*args, **kwargs)

        model.forward = counting


def _prompt(rng, n):
    return [rng.randrange(VOCAB - 2) for _ in range(n)]


def _turn(batched, slot, rng, commits=2, block=4):
    """Decode a little in the batch (commits move the slot past its prompt), then finish the request."""
    for _ in range(commits):
        batched.forward([Row(slot, torch.tensor(_prompt(rng, block)), True)])
    batched.release(slot)


@pytest.mark.parametrize("build,tolerance", [(tiny_llama, TIGHT), (tiny_qwen3, TIGHT), (tiny_hybrid, HYBRID)],
                         ids=["llama", "qwen3", "hybrid"])
def test_a_next_turn_prefills_only_what_it_adds_and_decodes_like_a_fresh_prompt(build, tolerance):
    rng = random.Random(3)
    model = build()
    batched = SlotBatchDenoiser(model, 3, keep_tokens=1000)
    assert batched.solo.checkpoints == []  # the constructor's probe prompts are no conversation's
    first = _prompt(rng, 20)
    slot, _ = batched.admit(first)
    other, _ = batched.admit(_prompt(rng, 11))  # another conversation decoding alongside
    _turn(batched, slot, rng)
    following = first + _prompt(rng, 9)  # the reply and a tool result, as the next turn renders them
    counted = ForwardLengths(model)
    slot, last = batched.admit(following)
    assert counted.lengths == [9] and batched.solo.reused_tokens == len(first)
    fresh = CachedDenoiser(model).prefill(following)
    assert (last - fresh.last_logits).abs().max().item() <= tolerance
    block = torch.tensor(_prompt(rng, 4))
    out = batched.forward([Row(slot, block, False), Row(other, block, False)])
    assert (out[0] - CachedDenoiser(model).denoise(fresh, block)).abs().max().item() <= tolerance


def test_without_a_budget_nothing_is_kept():
    model = tiny_qwen3()
    batched = SlotBatchDenoiser(model, 2)
    prompt = _prompt(random.Random(4), 12)
    slot, _ = batched.admit(prompt)
    batched.release(slot)
    counted = ForwardLengths(model)
    batched.admit(prompt + [5, 6])
    assert counted.lengths == [14] and batched.solo.reused_tokens == 0


@pytest.mark.parametrize("build", [tiny_llama, tiny_qwen3], ids=["llama", "qwen3"])
def test_prompts_admitted_together_are_kept_for_their_next_turns(build):
    """A joint admission prefills in the batch, not through the batch-1 path: its prompts are exported
    from the slots as checkpoints. The next turns of two of them, arriving with a new conversation,
    are prefilled from those checkpoints (their new tokens only), the new one from scratch, and every
    row's logits equal its batch-1 prefill's."""
    rng = random.Random(5)
    model = build()
    batched = SlotBatchDenoiser(model, 4, keep_tokens=1000)
    opening = _prompt(rng, 10)
    prompts = [opening + _prompt(rng, n) for n in (6, 3)]
    counted = ForwardLengths(model)
    admitted = batched.admit_many(prompts)
    assert len(counted.lengths) == 1  # one joint forward
    for slot, _ in admitted:
        _turn(batched, slot, rng)
    nexts = [prompts[0] + _prompt(rng, 5), _prompt(rng, 7), prompts[1] + _prompt(rng, 2)]
    counted.lengths.clear()
    admitted = batched.admit_many(nexts)
    assert sorted(counted.lengths) == [2, 5, 7]  # two continued turns, one new prompt
    for (slot, last), ids in zip(admitted, nexts):
        assert batched.length(slot) == len(ids)
        assert (last - CachedDenoiser(model).prefill(ids).last_logits).abs().max().item() <= TIGHT


def test_the_budget_keeps_the_most_recent_conversations():
    rng = random.Random(6)
    model = tiny_qwen3()
    batched = SlotBatchDenoiser(model, 2, keep_tokens=30)
    a, b, c = _prompt(rng, 15), _prompt(rng, 14), _prompt(rng, 12)
    for prompt in (a, b, c):
        slot, _ = batched.admit(prompt)
        _turn(batched, slot, rng)
    assert [len(point.ids) for point in batched.solo.checkpoints] == [14, 12]  # a's went first
    assert batched.solo.reusable(a + [1]) == 0 and batched.solo.reusable(b + [1]) == 14


def test_a_slot_with_linear_state_cannot_be_exported():
    model = tiny_hybrid()
    batched = SlotBatchDenoiser(model, 2, keep_tokens=1000)
    slot, _ = batched.admit(_prompt(random.Random(7), 8))
    with pytest.raises(UnsupportedCache, match="linear-attention"):
        batched.slots.export(slot, 8, batched.solo.new_cache())

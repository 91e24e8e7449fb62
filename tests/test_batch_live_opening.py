"""A prompt admitted while another sequence decodes copies the opening it shares with that sequence's
prompt (a common system prompt) instead of computing it: only its remainder runs, and every row still
gives the logits its batch-1 prefill gives. Only within one prompt-cache scope: another tenant's live
prompt is never copied (the speed and the reported cached tokens would tell what that tenant sent)."""

import random

import pytest
import torch
from tinymodels import VOCAB, tiny_hybrid, tiny_llama, tiny_qwen3

from clovercode.engine import batchcache
from clovercode.engine.batchdenoiser import SlotBatchDenoiser
from clovercode.engine.batchseam import Row
from clovercode.engine.denoiser import CachedDenoiser, enter_scope

TIGHT = 1e-9  # float64 tiny models: batched and batch-1 passes agree to rounding


def _prompts(seed, tails, opening=40):
    rng = random.Random(seed)
    start = [rng.randrange(VOCAB - 2) for _ in range(opening)]
    return [start + [rng.randrange(VOCAB - 2) for _ in range(n)] for n in tails]


def _tokens_run(model):
    """The token positions each forward of ``model`` runs, one entry per forward."""
    runs = []
    right = model.forward
    model.forward = lambda *args, **kwargs: runs.append(int(kwargs["input_ids"].numel())) or right(*args, **kwargs)
    return runs


def _agrees(model, batched, admitted, prompts):
    """Each admitted row's last logits, and a committing and a denoising pass after, equal batch 1."""
    solo = CachedDenoiser(model)
    states = {}
    for (slot, last), ids in zip(admitted, prompts):
        states[slot] = solo.prefill(ids)
        assert batched.length(slot) == len(ids)
        assert (last - states[slot].last_logits).abs().max().item() <= TIGHT
    block = torch.tensor([1, 2, 3, 4])
    for commit in (True, False):
        rows = [Row(slot, block, commit) for slot, _ in admitted]
        for row, out in zip(rows, batched.forward(rows)):
            state = states[row.slot]
            if commit:
                ref, state.cache = solo._run(block, state.length, None, state.cache, keep_last=False)
                state.length += len(block)
            else:
                ref = solo.denoise(state, block)
            assert (out - ref.float()).abs().max().item() <= TIGHT


@pytest.mark.parametrize("build", [tiny_llama, tiny_qwen3], ids=["llama", "qwen3"])
def test_a_prompt_arriving_while_another_decodes_runs_only_what_follows_their_common_opening(build):
    model = build()
    first, later = _prompts(1, (7, 12))
    batched = SlotBatchDenoiser(model, 3)
    live = batched.admit(first)
    batched.forward([Row(live[0], torch.tensor([5, 6, 7, 8]), True)])  # the live row decodes on
    runs = _tokens_run(model)
    admitted = batched.admit_many([later])
    assert runs == [12]  # the 40 shared positions were copied, not computed
    assert batched.cached[admitted[0][0]] == 40
    _agrees(model, batched, admitted, [later])


def test_the_longest_live_opening_is_copied_after_rows_moved_and_mixed_lengths_run_apart():
    model = tiny_qwen3()
    a, b, c = _prompts(2, (9, 5, 3))
    b = a[:45] + b[40:]  # b shares 45 positions with a, c only the first 40
    batched = SlotBatchDenoiser(model, 5)
    c_slot, gone, _ = (batched.admit(ids)[0] for ids in (c, [9] * 5, a))
    batched.release(c_slot)  # c leaves: a, in the last row, moves into its hole
    fresh = [random.Random(3).randrange(VOCAB - 2) for _ in range(120)]  # opens like nothing live
    runs = _tokens_run(model)
    admitted = batched.admit_many([b, fresh])
    # b copies 45 positions from a and runs its 5; the fresh prompt's 120 run in a forward of their own
    assert sorted(runs) == [5, 120]
    assert [batched.cached[slot] for slot, _ in admitted] == [45, 0]
    batched.release(gone)
    _agrees(model, batched, admitted, [b, fresh])


def test_another_scopes_live_prompt_is_never_copied():
    model = tiny_llama()
    theirs, mine = _prompts(4, (6, 8))
    batched = SlotBatchDenoiser(model, 3)
    enter_scope(batched, "5:alice/")
    batched.admit(theirs)
    enter_scope(batched, "3:bob/")
    runs = _tokens_run(model)
    admitted = batched.admit_many([mine])
    assert runs == [len(mine)] and batched.cached[admitted[0][0]] == 0  # all of it computed
    enter_scope(batched, "5:alice/")
    runs.clear()
    again = batched.admit_many([mine])
    assert runs == [8] and batched.cached[again[0][0]] == 40  # the same tenant's opening is copied
    _agrees(model, batched, admitted + again, [mine, mine])


def test_a_live_opening_that_is_not_copied_breaks_the_agreement(monkeypatch):
    monkeypatch.setattr(batchcache.SlotCache, "share", lambda self, source, targets, length: self.lengths.update(
        {slot: length for slot in targets}))
    model = tiny_qwen3()
    first, later = _prompts(5, (4, 9))
    batched = SlotBatchDenoiser(model, 2)
    batched.admit(first)
    (_, last), = batched.admit_many([later])
    assert (last - CachedDenoiser(model).prefill(later).last_logits).abs().max().item() > 1e-3


def test_a_hybrid_model_copies_nothing_its_recurrent_state_at_the_opening_is_kept_nowhere():
    model = tiny_hybrid()
    first, later = _prompts(6, (4, 9))
    batched = SlotBatchDenoiser(model, 2)
    batched.admit(first)
    admitted = batched.admit_many([later])
    assert batched.cached[admitted[0][0]] == 0
    _agrees(model, batched, admitted, [later])

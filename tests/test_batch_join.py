"""A request that joins a decoding batch (engine/batchdecode.py, ``SlotBatchDenoiser.join``) runs no
forward of its own: the opening it shares with a live row is copied, a few positions fewer so that the
rest of its prompt is whole blocks, and that rest is committed by the batch's next forward, as
committing rows (one a block, at consecutive offsets) beside the decoding ones. Its output is still
the one it gets alone, token for token. What it copies is what the source row has committed (a row
that joined a moment ago has only its copied opening), and only within one prompt-cache scope."""

from __future__ import annotations

import random
from dataclasses import replace

import torch
from tinymodels import EOS_ID, MASK_ID, VOCAB, tiny_hybrid, tiny_llama, tiny_qwen3

from clovercode.engine import batchdenoiser
from clovercode.engine.batchdecode import BatchDecoder, Request
from clovercode.engine.batchseam import Row
from clovercode.engine.batchdenoiser import SlotBatchDenoiser
from clovercode.engine.decoder import DecodePlan, DecodeResult, decode_stream
from clovercode.engine.denoiser import CachedDenoiser
from clovercode.engine.stops import Stops

PLAN = DecodePlan(block_size=4, mask_id=MASK_ID, max_new_tokens=12)
STOPS = Stops(frozenset({EOS_ID}))


def detok(ids):
    return "".join(chr(40 + i) for i in ids)


def _prompts(seed, tails, opening=40):
    rng = random.Random(seed)
    start = [rng.randrange(4, VOCAB - 2) for _ in range(opening)]
    return [start + [rng.randrange(4, VOCAB - 2) for _ in range(n)] for n in tails]


def _forwards(model):
    """The (rows, width) of each forward of ``model``."""
    runs = []
    right = model.forward
    model.forward = lambda *args, **kwargs: runs.append(tuple(kwargs["input_ids"].shape)) or right(*args, **kwargs)
    return runs


def _alone(model, prompt, plan=PLAN):
    return list(decode_stream(CachedDenoiser(model), prompt, plan, detok, STOPS))[-1]


def _drain(decoder, results, steps=200, before_step=None):
    for step in range(steps):
        if not decoder.active:
            return
        if before_step is not None:
            before_step(step)
        for key, item in decoder.step():
            if isinstance(item, DecodeResult):
                results[key] = item
    raise AssertionError("the batch did not finish")


def _same(alone, batched):
    assert batched.tokens == alone.tokens and batched.finish == alone.finish
    assert (batched.stats.denoise_passes, batched.stats.commits) == (alone.stats.denoise_passes, alone.stats.commits)


def test_a_request_joining_a_decoding_batch_runs_no_forward_of_its_own_and_decodes_as_alone():
    model = tiny_qwen3()
    first, later = _prompts(1, (7, 10))  # later: 50 tokens, 40 of them the opening `first` holds
    decoder = BatchDecoder(SlotBatchDenoiser(model, 3), detok)
    decoder.add("first", first, PLAN, STOPS)
    decoder.step()
    runs = _forwards(model)
    decoder.add("later", later, PLAN, STOPS)
    assert runs == []  # joining computed nothing: 38 positions copied, the other 12 ride the next forward
    slot = decoder.active["later"].slot
    assert decoder.denoiser.cached[slot] == 38 and (len(later) - 38) % PLAN.block_size == 0
    results = {}
    _drain(decoder, results)
    assert all(width == PLAN.block_size for _, width in runs)  # every forward a decoding step of blocks
    assert runs[:2] == [(4, 4), (2, 4)]  # its 3 prompt blocks went in the next forward, beside `first`'s row
    _same(_alone(model, later), results["later"])
    _same(_alone(model, first), results["first"])
    assert results["later"].stats.cached_tokens == 38


def test_consecutive_committing_rows_of_one_slot_are_its_prefill():
    model = tiny_qwen3()
    (prompt,) = _prompts(8, (10,))
    batched = SlotBatchDenoiser(model, 3)
    other, _ = batched.admit(prompt[:7] + [9, 9, 9])
    slot, _ = batched.admit(prompt[:38])
    rows = [Row(other, torch.tensor([1, 2, 3, 4]))] + [
        Row(slot, torch.tensor(prompt[38 + at:42 + at]), True, None, at) for at in (8, 0, 4)]  # in any order
    logits = batched.forward(rows)
    assert batched.length(slot) == 50 and batched.length(other) == 10
    alone = CachedDenoiser(model).prefill(prompt)
    assert (logits[1, -1] - alone.last_logits).abs().max().item() <= 1e-9  # the block at 8 ends the prompt


def test_a_row_that_joined_a_moment_ago_lends_only_what_it_has_committed(monkeypatch):
    # b and c join together beside a; c shares 70 positions with b, but b has committed only the 40
    # it copied from a until the next forward: copying 70 would hand c keys nobody has computed yet
    model = tiny_llama()
    a, b, c = _prompts(2, (5, 40, 38))
    c[:70] = b[:70]
    decoder = BatchDecoder(SlotBatchDenoiser(model, 4), detok)
    monkeypatch.setattr(batchdenoiser, "JOIN_MAX_BLOCKS", 10)
    decoder.add("a", a, PLAN, STOPS)
    decoder.step()
    runs = _forwards(model)
    decoder.add_many([Request("b", b, PLAN, STOPS), Request("c", c, PLAN, STOPS)])
    assert runs == []
    slots = {key: decoder.active[key].slot for key in "bc"}
    assert decoder.denoiser.cached[slots["b"]] == 40 and decoder.denoiser.cached[slots["c"]] <= 40
    results = {}
    _drain(decoder, results)
    assert runs[0] == (1 + 10 + 10, 4)  # a's row, b's 10 prompt blocks and c's 10 in one forward
    for key, prompt in (("a", a), ("b", b), ("c", c)):
        _same(_alone(model, prompt), results[key])


def test_another_scopes_live_prompt_is_never_joined():
    model = tiny_llama()
    theirs, mine = _prompts(3, (6, 9))
    decoder = BatchDecoder(SlotBatchDenoiser(model, 3), detok)
    decoder.add("theirs", theirs, replace(PLAN, cache_scope="5:alice/"), STOPS)
    runs = _forwards(model)
    decoder.add("mine", mine, replace(PLAN, cache_scope="3:bob/"), STOPS)
    assert runs == [(1, len(mine))] and decoder.denoiser.cached[decoder.active["mine"].slot] == 0  # prefilled whole
    results = {}
    _drain(decoder, results)
    _same(_alone(model, mine), results["mine"])


def test_a_long_rest_a_hybrid_model_and_an_empty_batch_take_a_prefill():
    model = tiny_qwen3()
    first, long = _prompts(4, (3, 4 * 4 + 3))  # the rest would be 5 blocks
    decoder = BatchDecoder(SlotBatchDenoiser(model, 3), detok)
    runs = _forwards(model)
    decoder.add("first", first, PLAN, STOPS)  # nothing decodes yet: a prefill is one forward anyway
    assert len(runs) == 1
    decoder.step()
    runs.clear()
    decoder.add("long", long, PLAN, STOPS)
    assert len(runs) == 1 and not decoder.active["long"].prompt
    hybrid = tiny_hybrid()
    first, later = _prompts(5, (3, 6))
    decoder = BatchDecoder(SlotBatchDenoiser(hybrid, 2), detok)
    decoder.add("first", first, PLAN, STOPS)
    decoder.step()
    runs = _forwards(hybrid)
    decoder.add("later", later, PLAN, STOPS)
    assert len(runs) == 1 and not decoder.active["later"].prompt
    results = {}
    _drain(decoder, results)
    _same(_alone(hybrid, later), results["later"])


def test_a_joining_request_removed_before_its_prompt_is_committed_frees_its_slot():
    model = tiny_qwen3()
    first, leaving, staying = _prompts(6, (5, 12, 9))
    decoder = BatchDecoder(SlotBatchDenoiser(model, 3), detok)
    decoder.add("first", first, PLAN, STOPS)
    decoder.step()
    decoder.add_many([Request("leaving", leaving, PLAN, STOPS), Request("staying", staying, PLAN, STOPS)])
    assert decoder.active["leaving"].prompt and decoder.active["staying"].prompt
    decoder.remove("leaving")  # its client left before the forward that would commit its prompt
    assert len(decoder.denoiser.slots.lengths) == 2
    results = {}
    _drain(decoder, results)
    assert set(results) == {"first", "staying"}
    _same(_alone(model, staying), results["staying"])
    _same(_alone(model, first), results["first"])


def test_a_joined_prompt_is_kept_for_its_conversations_next_turn():
    model = tiny_llama()
    first, later = _prompts(7, (5, 8))
    decoder = BatchDecoder(SlotBatchDenoiser(model, 3, keep_tokens=1000), detok)
    decoder.add("first", first, PLAN, STOPS)
    decoder.step()
    decoder.add("later", later, PLAN, STOPS)
    assert decoder.active["later"].prompt
    results = {}
    _drain(decoder, results)
    nxt = later + results["later"].tokens + [7, 8, 9]
    assert decoder.denoiser.solo.reusable(nxt) == len(later)
    (slot, last), = decoder.denoiser.admit_many([nxt])
    assert (last - CachedDenoiser(model).prefill(nxt).last_logits).abs().max().item() <= 1e-9
    assert torch.equal(torch.tensor(results["later"].tokens), torch.tensor(_alone(model, later).tokens))

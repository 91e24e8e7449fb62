"""Exactness on tiny random models (float64): cached block decoding equals recomputing everything with
the block mask every pass; denoising passes leave committed state bit-identical; B = 1 is greedy
``generate``; prompt reuse changes nothing."""

import pytest
import torch

from clovercode.engine import cachestate
from clovercode.engine.decoder import DecodePlan, decode
from clovercode.engine.denoiser import CachedDenoiser, RecomputeDenoiser, mask_is_honoured
from clovercode.engine.stops import Stops
from tinymodels import EOS_ID, MASK_ID, tiny_hybrid, tiny_llama, tiny_qwen3

PROMPT = list(range(3, 30))
STOPS = Stops(frozenset({EOS_ID}))


def detok(ids):
    return " ".join(map(str, ids))


@pytest.fixture(scope="module")
def models():
    return {"llama": tiny_llama(), "qwen3": tiny_qwen3(), "hybrid": tiny_hybrid()}


CASES = [("llama", 8, "threshold", 0.5), ("llama", 8, "topk", 0.9), ("qwen3", 8, "threshold", 0.8),
         ("qwen3", 4, "steps", 0.9), ("hybrid", 4, "threshold", 0.9), ("hybrid", 8, "topk", 0.9)]


@pytest.mark.parametrize("name, block, strategy, threshold", CASES)
def test_cached_blocks_equal_the_recomputing_reference(models, name, block, strategy, threshold):
    model = models[name]
    plan = DecodePlan(block_size=block, mask_id=MASK_ID, strategy=strategy, threshold=threshold, top_k=3, steps=2,
                      max_new_tokens=16 if name == "hybrid" else 32)
    passes = []
    cached = decode(CachedDenoiser(model), PROMPT, plan, detok, STOPS, on_pass=passes.append)
    reference = decode(RecomputeDenoiser(model), PROMPT, plan, detok, STOPS)
    assert cached.tokens == reference.tokens
    assert cached.stats.forwards == reference.stats.forwards
    assert any(len(p.accepted) > 1 for p in passes), "the case should accept several positions in some pass"


@pytest.mark.parametrize("name", ["llama", "qwen3", "hybrid"])
def test_denoise_passes_leave_committed_state_bit_identical(models, name):
    model = models[name]
    denoiser = CachedDenoiser(model)
    state = denoiser.prefill(PROMPT)
    block = torch.full((8,), MASK_ID)
    state = denoiser.commit(state, torch.arange(40, 48))  # some committed blocks, not just the prompt
    before = [(key, t.clone()) for key, t in cachestate.state_tensors(state.cache)]
    for step in range(3):
        block[step] = 50 + step
        denoiser.denoise(state, block)
    after = cachestate.state_tensors(state.cache)
    assert [k for k, _ in before] == [k for k, _ in after]
    assert all(torch.equal(b, a) for (_, b), (_, a) in zip(before, after))
    assert denoiser.layout == ("hybrid" if name == "hybrid" else "attention")
    # The check can fail: the same forward without the restore does change the committed state.
    with torch.no_grad():
        model(input_ids=block[None], attention_mask=None, use_cache=True, **{denoiser.cache_arg: state.cache},
              position_ids=torch.arange(state.length, state.length + 8)[None])
    changed = cachestate.state_tensors(state.cache)
    assert len(changed) != len(before) or not all(torch.equal(b, a) for (_, b), (_, a) in zip(before, changed))


@pytest.mark.parametrize("name", ["llama", "qwen3", "hybrid"])
def test_block_size_one_is_greedy_generate(models, name):
    model = models[name]
    expected = model.generate(torch.tensor([PROMPT]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                              pad_token_id=0)[0, len(PROMPT):].tolist()
    result = decode(CachedDenoiser(model), PROMPT, DecodePlan(block_size=1, mask_id=None, max_new_tokens=12),
                    detok, Stops())
    assert result.tokens == expected
    assert result.stats.forwards == 11  # one commit per token; the last one is never needed


@pytest.mark.parametrize("name", ["qwen3", "hybrid"])
def test_prompt_reuse_gives_the_same_tokens(models, name):
    model = models[name]
    plan = DecodePlan(block_size=4, mask_id=MASK_ID, strategy="topk", top_k=2, max_new_tokens=12)
    reusing = CachedDenoiser(model, reuse_prompt=True)
    first = decode(reusing, PROMPT, plan, detok, STOPS)
    longer = PROMPT + first.tokens + [7, 8, 9]
    again = decode(reusing, longer, plan, detok, STOPS)
    assert reusing.reused_tokens == len(PROMPT)
    fresh = decode(CachedDenoiser(model), longer, plan, detok, STOPS)
    assert again.tokens == fresh.tokens
    unrelated = decode(reusing, [5] + PROMPT, plan, detok, STOPS)
    assert reusing.reused_tokens == 0
    assert unrelated.tokens == decode(CachedDenoiser(model), [5] + PROMPT, plan, detok, STOPS).tokens


def test_models_honour_custom_masks(models):
    assert all(mask_is_honoured(m) for m in models.values())


def test_float32_cached_and_reference_agree_on_llama():
    model = tiny_llama(dtype=torch.float32)
    plan = DecodePlan(block_size=8, mask_id=MASK_ID, strategy="topk", top_k=2, max_new_tokens=24)
    assert (decode(CachedDenoiser(model), PROMPT, plan, detok, STOPS).tokens
            == decode(RecomputeDenoiser(model), PROMPT, plan, detok, STOPS).tokens)


def test_a_counter_a_layer_advances_in_place_is_restored():
    """transformers 5.25 added ``cumulative_length_linear`` (a tensor advanced by ``add_``); whatever a
    release adds next, a tensor beside the keys and values comes back to its committed value."""
    from transformers.cache_utils import LinearAttentionLayer

    layer = LinearAttentionLayer()
    layer.step_counter = torch.tensor(7)  # a counter of some future release, written in place
    layer.update_conv_state(torch.zeros(1, 4, 3))
    counter, conv = layer.step_counter, layer.conv_states[0]
    snap = cachestate.snapshot(layer)
    layer.step_counter.add_(8)
    layer.update_conv_state(torch.ones(1, 4, 8))
    cachestate.restore(layer, snap)
    assert int(layer.step_counter) == 7 and layer.step_counter is counter  # same storage, old value
    assert torch.equal(layer.conv_states[0], torch.zeros(1, 4, 3)) and layer.conv_states[0] is conv

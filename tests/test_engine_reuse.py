"""Cross-turn prompt reuse (CachedDenoiser(reuse_prompt=True)) is exact: a turn whose prompt extends the
last turn's prompt prefills only the new tokens, and its logits, its whole cache state and its greedy
decode equal a fresh prefill's. On the hybrid model (Gated DeltaNet) this checks that the recurrent and
conv states come back as they were at the end of the checkpointed prompt, not as the last decode left
them. Two references: a fresh prefill of the whole prompt (equal within rounding: transformers' reference
Gated DeltaNet kernel computes in float32 and chunks the sequence differently, ~1e-6 here, against 0.07 when
the linear states are not restored), and the same two-step prefill with no decode between the turns
(bit-identical: the same operations on the same state)."""

import pytest
import torch

from clovercode.engine import cachestate
from clovercode.engine.decoder import DecodePlan, decode
from clovercode.engine.denoiser import CachedDenoiser
from clovercode.engine.stops import Stops
from tinymodels import EOS_ID, MASK_ID, tiny_hybrid, tiny_qwen3

PROMPT = list(range(3, 30))
STOPS = Stops(frozenset({EOS_ID}))
PLAN = DecodePlan(block_size=4, mask_id=MASK_ID, strategy="topk", top_k=2, max_new_tokens=12)
TOLERANCE = {"qwen3": 1e-9, "hybrid": 1e-4}  # float64 throughout / float32 inside the linear-attention kernel


def detok(ids):
    return " ".join(map(str, ids))


@pytest.fixture(scope="module")
def models():
    return {"qwen3": tiny_qwen3(), "hybrid": tiny_hybrid()}


def two_turns(model):
    """Turn 1 decodes; turn 2's prompt is turn 1's prompt, its reply and a tool result."""
    reusing = CachedDenoiser(model, reuse_prompt=True)
    first = decode(reusing, PROMPT, PLAN, detok, STOPS)
    assert first.tokens, "turn 1 must decode something, or the cache would not have moved past the prompt"
    return reusing, PROMPT + first.tokens + [7, 8, 9, 10, 11]


def assert_states_close(reused, fresh, tolerance):
    left, right = cachestate.state_tensors(reused), cachestate.state_tensors(fresh)
    assert [name for name, _ in left] == [name for name, _ in right]
    for (name, a), (_, b) in zip(left, right):
        assert a.shape == b.shape, name
        assert torch.allclose(a, b, atol=tolerance, rtol=0), f"{name} differs by {(a - b).abs().max().item():.3g}"


@pytest.mark.parametrize("name", ["qwen3", "hybrid"])
def test_reused_prefill_equals_a_fresh_prefill(models, name):
    model = models[name]
    reusing, longer = two_turns(model)
    reused = reusing.prefill(longer)
    assert reusing.reused_tokens == len(PROMPT)
    fresh = CachedDenoiser(model).prefill(longer)
    drift = (reused.last_logits - fresh.last_logits).abs().max().item()
    assert drift <= TOLERANCE[name], f"the reused prefill's logits drift by {drift:.3g}"
    assert reused.length == fresh.length
    held = [key for key, _ in cachestate.state_tensors(reused.cache)]
    assert any("recurrent_states" in key for key in held) == (name == "hybrid")  # what the check covers
    assert_states_close(reused.cache, fresh.cache, TOLERANCE[name])
    undisturbed = CachedDenoiser(model, reuse_prompt=True)  # the same two prefills, nothing decoded between
    undisturbed.prefill(PROMPT)
    same_steps = undisturbed.prefill(longer)
    assert torch.equal(reused.last_logits, same_steps.last_logits)
    assert_states_close(reused.cache, same_steps.cache, 0.0)


@pytest.mark.parametrize("name", ["qwen3", "hybrid"])
def test_reused_turn_decodes_like_a_fresh_one(models, name):
    model = models[name]
    reusing, longer = two_turns(model)
    again = decode(reusing, longer, PLAN, detok, STOPS)
    assert reusing.reused_tokens == len(PROMPT)
    fresh = decode(CachedDenoiser(model), longer, PLAN, detok, STOPS)
    assert again.tokens == fresh.tokens
    assert again.stats.forwards == fresh.stats.forwards
    ar = DecodePlan(block_size=1, mask_id=None, max_new_tokens=12)
    third = longer + again.tokens + [12, 13]  # a third turn, reusing the second's checkpoint, decoded AR
    assert decode(reusing, third, ar, detok, STOPS).tokens == decode(CachedDenoiser(model), third, ar, detok, STOPS).tokens
    assert reusing.reused_tokens == len(longer)


@pytest.mark.parametrize("name", ["qwen3", "hybrid"])
def test_same_prompt_again_reuses_everything(models, name):
    model = models[name]
    reusing, _ = two_turns(model)
    reused = reusing.prefill(PROMPT)  # a retry of the same turn: nothing to prefill
    assert reusing.reused_tokens == len(PROMPT)
    fresh = CachedDenoiser(model).prefill(PROMPT)
    assert torch.equal(reused.last_logits, fresh.last_logits)
    assert_states_close(reused.cache, fresh.cache, 0.0)


@pytest.mark.parametrize("name", ["qwen3", "hybrid"])
def test_a_diverging_prompt_is_prefilled_from_scratch(models, name):
    model = models[name]
    reusing, _ = two_turns(model)
    diverging = PROMPT[:10] + [60, 61] + PROMPT[10:]  # shares a prefix, then differs: no checkpoint fits
    result = decode(reusing, diverging, PLAN, detok, STOPS)
    assert reusing.reused_tokens == 0
    assert result.tokens == decode(CachedDenoiser(model), diverging, PLAN, detok, STOPS).tokens
    shorter = PROMPT[:-3]  # a prefix of the checkpoint: its state at that point was never kept
    reusing.prefill(diverging)
    state = reusing.prefill(shorter)
    assert reusing.reused_tokens == 0
    assert torch.equal(state.last_logits, CachedDenoiser(model).prefill(shorter).last_logits)


def _conversation(model, reusing, opening):
    """One turn of a conversation that opens with ``opening``; → the next turn's prompt."""
    first = decode(reusing, opening, PLAN, detok, STOPS)
    return opening + first.tokens + [7, 8, 9]


@pytest.mark.parametrize("name", ["qwen3", "hybrid"])
def test_interleaved_conversations_each_reuse_their_own_prompt(models, name):
    """A server takes turns of several conversations in any order: with room for both prompts, each
    conversation's next turn extends its own last prompt and decodes what a fresh decoder gives."""
    model = models[name]
    reusing = CachedDenoiser(model, reuse_prompt=True, keep_tokens=200)
    a_opening, b_opening = PROMPT, [40, 41] + PROMPT[5:]
    a_next = _conversation(model, reusing, a_opening)
    b_next = _conversation(model, reusing, b_opening)
    for opening, prompt in ((a_opening, a_next), (b_opening, b_next)):
        again = decode(reusing, prompt, PLAN, detok, STOPS)
        assert reusing.reused_tokens == len(opening)
        assert again.tokens == decode(CachedDenoiser(model), prompt, PLAN, detok, STOPS).tokens
    assert [len(p.ids) for p in reusing.checkpoints] == [len(a_next), len(b_next)]


@pytest.mark.parametrize("name", ["qwen3", "hybrid"])
def test_the_least_recently_used_checkpoint_goes_first(models, name):
    model = models[name]
    reusing = CachedDenoiser(model, reuse_prompt=True, keep_tokens=len(PROMPT) + 25)
    a_next = _conversation(model, reusing, PROMPT)
    b_opening = [40, 41] + PROMPT[5:]
    _conversation(model, reusing, b_opening)  # A's and B's openings fit the budget together
    assert reusing.reusable(a_next) == len(PROMPT)
    _conversation(model, reusing, [50] + PROMPT[9:])  # a third does not: A's, the oldest, goes
    assert reusing.reusable(a_next) == 0 and reusing.reusable(b_opening + [1]) == len(b_opening)
    state = reusing.prefill(a_next)
    assert reusing.reused_tokens == 0
    assert torch.allclose(state.last_logits, CachedDenoiser(model).prefill(a_next).last_logits, atol=TOLERANCE[name], rtol=0)


@pytest.mark.parametrize("name", ["qwen3", "hybrid"])
def test_two_turns_forking_from_one_checkpoint_never_share_its_cache(models, name):
    """Two prompts extend the same checkpoint (a retried turn, two requests from one transcript): the
    first takes the checkpoint's cache and replaces it with its own, the second is prefilled afresh,
    so neither sees the other's tokens in its state."""
    model = models[name]
    reusing = CachedDenoiser(model, reuse_prompt=True, keep_tokens=1000)
    reusing.prefill(PROMPT)
    left, right = PROMPT + [7, 8, 9], PROMPT + [10, 11]
    assert reusing.reusable(left) == reusing.reusable(right) == len(PROMPT)
    left_state = reusing.prefill(left)
    assert reusing.reused_tokens == len(PROMPT)
    assert reusing.reusable(right) == 0  # the checkpoint's cache now holds the left turn
    right_state = reusing.prefill(right)
    assert reusing.reused_tokens == 0
    for prompt, state in ((left, left_state), (right, right_state)):
        fresh = CachedDenoiser(model).prefill(prompt)
        assert torch.allclose(state.last_logits, fresh.last_logits, atol=TOLERANCE[name], rtol=0)
        assert_states_close(state.cache, fresh.cache, TOLERANCE[name])

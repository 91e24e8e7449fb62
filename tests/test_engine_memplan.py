"""The memory plan (engine/memplan.py) and the caches it bounds: Clover's figures on an H200, the slots
it allows from a token budget, and buffers that grow by whole chunks, never by doubling, in the batch-1
cache (kvbuffer.py) and the slot cache (batchcache.py), checked on every buffer object they allocate
through many growing prompts."""

import random

import pytest
import torch
from tinymodels import VOCAB, tiny_hybrid, tiny_qwen3

from clovercode.backends.base import ContextTooLong, GenerationParams
from clovercode.backends.embedded import EmbeddedBackend
from clovercode.engine import batchcache, kvbuffer, memplan
from clovercode.engine.batchcache import CacheFull
from clovercode.engine.batchdenoiser import SlotBatchDenoiser
from clovercode.engine.batchseam import Row
from clovercode.engine.config import EngineConfig
from clovercode.engine.denoiser import CachedDenoiser
from clovercode.engine.memplan import CHUNK_TOKENS, KEPT_PROMPTS, GiB, PlanError, clover_shape, plan, round_up, shape_from_config
from clovercode.ground.errors import ConfigError
from clovercode.ground.messages import Message

H200_FREE = 139 * GiB


def test_clovers_kv_is_20_kb_a_token_and_8_slots_of_128k_plan_under_120_gib_on_an_h200():
    shape = clover_shape()
    assert (shape.layers, shape.full_layers, shape.linear_layers) == (40, 10, 30)
    assert (shape.q_heads, shape.kv_heads, shape.head_dim, shape.dtype_bytes) == (16, 2, 256, 2)
    assert shape.kv_bytes_per_token == 10 * 2 * 2 * 256 * 2 == 20480
    assert shape.weights_bytes == 70_000_000_000
    p = plan(shape, free_bytes=H200_FREE, slots=8, max_context=131072)
    assert p.fits and p.slots == 8 and p.slot_tokens == round_up(131072 + 32) == 131584
    assert p.capacity_tokens == 8 * 131584 and p.kv_bytes == p.capacity_tokens * 20480
    assert p.peak_bytes <= 120 * GiB and p.headroom_bytes > 0
    lines = p.lines()
    assert lines[-1] == f"planned peak GiB: {round(p.peak_bytes / GiB, 2)}"
    assert any(line.startswith("KV cache: 20.08 GiB") for line in lines)


def test_with_too_little_memory_the_plan_takes_fewer_slots_and_says_when_none_fits():
    shape = clover_shape()
    fewer = plan(shape, free_bytes=100 * GiB, slots=8, max_context=131072)
    assert fewer.fits and 1 <= fewer.slots < 8 and fewer.requested_slots == 8
    more = plan(shape, free_bytes=100 * GiB, slots=8, max_context=32768)
    assert more.slots > fewer.slots  # shorter contexts: more of them fit
    none = plan(shape, free_bytes=60 * GiB, slots=8, max_context=131072)  # the weights alone do not fit
    assert not none.fits and none.slots == 1 and "DOES NOT FIT" in none.lines()[-2]


def test_a_token_budget_caps_the_slots_and_one_too_small_for_a_request_is_refused():
    shape = clover_shape()
    capped = plan(shape, free_bytes=H200_FREE, slots=8, max_context=131072, max_batch_tokens=4 * 131584)
    assert capped.slots == 4 and capped.capacity_tokens == 4 * 131584
    with pytest.raises(PlanError, match="less than one request"):
        plan(shape, free_bytes=H200_FREE, max_context=131072, max_batch_tokens=65536)
    with pytest.raises(PlanError, match="holds no slot"):
        plan(shape, free_bytes=H200_FREE, max_context=131072, max_batch_tokens=131072)


def test_the_kv_bytes_per_token_are_what_a_real_cache_holds():
    for model in (tiny_qwen3(), tiny_hybrid()):
        shape = shape_from_config(model.config, dtype_bytes=8, weights_bytes=0)
        state = CachedDenoiser(model).prefill(list(range(3, 23)))
        held = sum(layer.keys.numel() * layer.keys.element_size() * 2 for layer in state.cache.layers
                   if getattr(layer, "keys", None) is not None)
        assert held == 20 * shape.kv_bytes_per_token
    assert shape.linear_layers > 0 and shape.linear_state_bytes > 0  # the hybrid's


def _recording(monkeypatch):
    """Every buffer the batch-1 cache allocates: (positions needed, positions allocated)."""
    made = []
    original = kvbuffer._grown

    def grown(current, new, used, capacity):
        made.append((used + new.shape[-2], capacity))
        return original(current, new, used, capacity)

    monkeypatch.setattr(kvbuffer, "_grown", grown)
    return made


@pytest.mark.parametrize("make", [tiny_qwen3, tiny_hybrid], ids=["qwen3", "hybrid"])
def test_the_batch_one_cache_grows_by_chunks_never_doubling(make, monkeypatch):
    monkeypatch.setattr(kvbuffer, "CHUNK_TOKENS", 16)
    made = _recording(monkeypatch)
    model, rng = make(), random.Random(3)
    denoiser = CachedDenoiser(model, reuse_prompt=True, keep_tokens=4096)
    prompt = [rng.randrange(3, VOCAB - 2) for _ in range(5)]
    for _ in range(12 if make is tiny_qwen3 else 6):  # a conversation: each prompt extends the last, then blocks
        prompt += [rng.randrange(3, VOCAB - 2) for _ in range(rng.randrange(1, 30))]
        state = denoiser.prefill(prompt)
        for _ in range(3):
            block = torch.tensor([rng.randrange(3, VOCAB - 2) for _ in range(4)])
            denoiser.denoise(state, block)
            denoiser.commit(state, block)
        for layer in state.cache.layers:  # the live objects: within one chunk of what they hold
            if isinstance(layer, kvbuffer.BufferedLayer):
                capacity = layer._key_buffer.shape[-2]
                assert layer._value_buffer.shape[-2] == capacity and capacity - layer.keys.shape[-2] < 16
    assert len(made) > 10
    for needed, capacity in made:
        assert capacity == round_up(needed, 16) and capacity - needed < 16  # never twice what is needed


def test_the_slot_cache_grows_by_chunks_never_doubling_and_stops_at_its_limit(monkeypatch):
    monkeypatch.setattr(batchcache, "CHUNK", 16)
    model, rng = tiny_qwen3(), random.Random(5)
    batched = SlotBatchDenoiser(model, 3, slot_tokens=200)
    seen: dict[int, tuple[int, int]] = {}  # buffer object → (time positions, the most any row needed then)
    need = 0
    slots = []
    for step in range(40):
        if len(slots) < 3:
            prompt = [rng.randrange(3, VOCAB - 2) for _ in range(rng.randrange(1, 60))]
            slots.append(batched.admit(prompt)[0])
        rows = [Row(s, torch.tensor([rng.randrange(3, VOCAB - 2) for _ in range(4)]), True) for s in slots
                if batched.length(s) + 4 <= 200]
        if rows:
            need = max([need] + [batched.length(r.slot) + 4 for r in rows])
            batched.forward(rows)
        for layer in batched.slots.layers:
            for buffer in layer.buffers:
                time_positions = buffer.shape[2]
                seen.setdefault(id(buffer), (time_positions, need))
                assert time_positions == batched.slots.time <= 208  # the limit, rounded up to a chunk
        if step % 7 == 6:
            batched.release(slots.pop(0))
    times = sorted({t for t, _ in seen.values()})
    assert len(times) > 3  # it grew several times
    for before, after in zip(times, times[1:]):
        assert after - before <= 16 * 4 and after < 2 * before  # chunks, not doubling
    for time_positions, needed in seen.values():
        assert time_positions - max(needed, 1) < 16 * 4 + 16  # a forward's block rounds up by at most a chunk
    with pytest.raises(CacheFull, match="does not fit a slot of 208"):
        batched.slots.reserve(209)
    assert batched.slots.time <= 208


def test_the_engine_plans_its_slots_from_the_token_budget():
    from clovercode.engine.engine import Engine

    engine = Engine.open("clover-tiny", EngineConfig(max_context=256, max_batch_tokens=1024))
    try:
        assert engine.max_context == 256
        p = engine.memory_plan(4)
        assert (p.slots, p.slot_tokens, p.max_context) == (2, 512, 256)  # 256 + a block of 16, in 512 chunks
        assert p.shape.kv_bytes_per_token == 4 * 2 * 2 * 64 * 4
        denoiser = engine.batch_denoiser(p.slots)
        assert denoiser.slots.limit == 512 and denoiser.solo.limit == 512
        assert engine.denoiser().limit == p.slot_tokens == 512  # the batch-1 cache holds the plan's limit too

        backend = EmbeddedBackend(engine)  # a request is held to max_context: refused, or its reply cut
        with pytest.raises(ContextTooLong, match=r"does not fit engine.max_context = 256 tokens .*window is 4096"):
            backend.prepare([Message("user", "word " * 300)], [], GenerationParams(max_new_tokens=64))
        prompt, plan_ = backend.prepare([Message("user", "hello")], [], GenerationParams(max_new_tokens=4096))
        assert plan_.max_new_tokens == 256 - len(prompt)
    finally:
        engine.close()


def test_bad_memory_settings_are_config_errors():
    for bad in ({"max_context": -1}, {"max_batch_tokens": 1.5}, {"memory_utilization": 0.0},
                {"memory_utilization": 1.5}, {"max_context": 4096, "max_batch_tokens": 1024}):
        with pytest.raises(ConfigError, match="engine.m"):
            EngineConfig(**bad)
    assert memplan.CHUNK_TOKENS == 512


def test_the_kept_prompts_figure_counts_each_kept_prompts_linear_state():
    shape = clover_shape()
    p = plan(shape, free_bytes=H200_FREE, slots=8, max_context=131072, prompt_cache_tokens=32768)
    assert 60e6 < shape.linear_state_bytes < 65e6  # ≈ 62 MB of Gated-DeltaNet state per sequence
    per_prompt = shape.linear_state_bytes + CHUNK_TOKENS * shape.kv_bytes_per_token
    assert p.kept_prompts == KEPT_PROMPTS
    assert p.kept_bytes == (32768 + 131072) * shape.kv_bytes_per_token + KEPT_PROMPTS * per_prompt
    assert p.kept_bytes - 163840 * shape.kv_bytes_per_token >= KEPT_PROMPTS * shape.linear_state_bytes
    assert p.peak_bytes <= 120 * GiB
    only_last = plan(shape, free_bytes=H200_FREE, slots=8, max_context=131072, prompt_cache_tokens=0)
    assert only_last.kept_prompts == 1 and only_last.kept_bytes == 131072 * shape.kv_bytes_per_token + per_prompt


def test_many_short_prompts_never_keep_more_checkpoints_than_the_bound():
    model, rng = tiny_hybrid(), random.Random(11)
    assert CachedDenoiser(model, reuse_prompt=True, keep_tokens=4096).keep_prompts == KEPT_PROMPTS  # the default
    bound = 4  # a small one, so that few prefills pass it (KEPT_PROMPTS is the same code path)
    denoiser = CachedDenoiser(model, reuse_prompt=True, keep_tokens=1 << 20, keep_prompts=bound)  # tokens never bind
    prompts = []
    for _ in range(bound + 6):  # distinct conversations of a few tokens each
        prompts.append([rng.randrange(3, VOCAB - 2) for _ in range(rng.randrange(2, 6))])
        denoiser.prefill(prompts[-1])
        assert len(denoiser.checkpoints) <= bound
    assert [point.ids for point in denoiser.checkpoints] == prompts[-bound:]  # the oldest went first
    states = {t.data_ptr() for point in denoiser.checkpoints for layer in point.cache.layers
              for t in (getattr(layer, "recurrent_states", None) or {}).values() if t is not None}
    assert len(states) >= bound  # each kept prompt holds its own linear state: what the plan counts per prompt
    denoiser.prefill(prompts[-1] + [5, 6])  # a kept prompt is still reused, an evicted one is prefilled anew
    assert denoiser.reused_tokens == len(prompts[-1])
    denoiser.prefill(prompts[0] + [5, 6])
    assert denoiser.reused_tokens == 0 and len(denoiser.checkpoints) == bound


def _tensors(cache):
    """Every tensor a cache holds (attention keys and values, linear layers' state dicts), copied."""
    found = []
    for layer in cache.layers:
        for value in vars(layer).values():
            found += [t for t in (value.values() if isinstance(value, dict) else [value]) if isinstance(t, torch.Tensor)]
    return [t.clone() for t in found]


def _same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


@pytest.mark.parametrize("make", [tiny_qwen3, tiny_hybrid], ids=["qwen3", "hybrid"])
def test_the_batch_one_cache_refuses_to_grow_past_its_limit_before_changing_anything(make, monkeypatch):
    made = _recording(monkeypatch)
    model, rng = make(), random.Random(13)
    denoiser = CachedDenoiser(model, reuse_prompt=True, keep_tokens=4096, limit=40)
    with pytest.raises(CacheFull, match="41 positions does not fit the batch-1 cache's 40"):
        denoiser.prefill([rng.randrange(3, VOCAB - 2) for _ in range(41)])
    state = denoiser.prefill([rng.randrange(3, VOCAB - 2) for _ in range(32)])
    block = torch.tensor([rng.randrange(3, VOCAB - 2) for _ in range(4)])
    denoiser.denoise(state, block)  # (its first pass also probes the model, in caches of its own)
    denoiser.commit(state, block)
    denoiser.commit(state, block)  # 40 positions: the limit itself fits
    before, allocated = _tensors(state.cache), len(made)
    for refused in (denoiser.denoise, denoiser.commit):
        with pytest.raises(CacheFull, match="44 positions"):
            refused(state, block)
    assert state.length == 40 and len(made) == allocated  # nothing allocated
    after = _tensors(state.cache)
    # bit for bit, spare capacity included: torch.empty's spare rows may hold NaN, which torch.equal calls unequal
    assert len(after) == len(before) and all(_same_bits(a, b) for a, b in zip(after, before))  # nothing changed


@pytest.mark.parametrize("make", [tiny_qwen3, tiny_hybrid], ids=["qwen3", "hybrid"])
def test_a_prefill_in_pieces_leaves_the_cache_and_logits_of_one_pass(monkeypatch, make):
    """The batch-1 prefill runs memplan.PREFILL_CHUNK positions at a time (the plan counts a piece's
    activations, not the prompt's): the cache it leaves decodes exactly as one whole-prompt pass's."""
    model = make()
    prompt = [int(t) for t in torch.randint(3, VOCAB - 3, (23,), generator=torch.Generator().manual_seed(5))]
    whole = CachedDenoiser(model).prefill(prompt)
    monkeypatch.setattr(memplan, "PREFILL_CHUNK", 5)
    pieces = CachedDenoiser(model).prefill(prompt)
    assert torch.allclose(whole.last_logits, pieces.last_logits, atol=1e-9)
    block = [VOCAB - 1] * 4
    # float32: the recurrent state summed in five pieces differs from one sum by rounding alone (up to ~1e-6
    # on some CPUs' kernels), which a block pass over it can carry into the logits; nothing more is allowed
    assert torch.allclose(CachedDenoiser(model).denoise(whole, block), CachedDenoiser(model).denoise(pieces, block),
                          atol=1e-5, rtol=0)


def test_a_single_sequence_plan_counts_its_cache_once_and_a_piece_of_prefill():
    shape = clover_shape("int4")
    # 40,960: the output projection is planned (and kept) in bf16, 0.47 GiB more than an int8 one
    served = plan(shape, free_bytes=24 * GiB, slots=1, max_context=40960, prompt_cache_tokens=0)
    alone = plan(shape, free_bytes=24 * GiB, slots=1, max_context=40960, prompt_cache_tokens=0, single=True)
    assert alone.kept_prompt_tokens == 0 and served.kept_prompt_tokens == 40960
    assert alone.transients["admitted prompt's own cache"] == 0
    assert alone.fits and not served.fits and alone.peak_bytes <= 0.9 * 24 * GiB
    assert alone.transients["prefill activations"] < GiB  # a 2,048-token piece and its mask, not 64K tokens

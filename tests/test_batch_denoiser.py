"""The slot-cache batched denoiser: every row of one batched forward gives the logits the batch-1
CachedDenoiser gives for the same sequence (denoising and committing rows mixed, prompts of different
lengths admitted at different times, slots released and reused, buffers grown)."""

import random

import pytest
import torch
from tinymodels import VOCAB, tiny_hybrid, tiny_llama, tiny_qwen3

from clovercode.engine import batchcache, batchdenoiser
from clovercode.engine.batchcache import UnsupportedCache
from clovercode.engine.batchdenoiser import SlotBatchDenoiser
from clovercode.engine.batchseam import Row
from clovercode.engine.denoiser import CachedDenoiser

TIGHT = 1e-9  # float64 tiny models: batched and batch-1 passes agree to rounding


class Solo:
    """The batch-1 reference: one CachedDenoiser state per sequence."""

    def __init__(self, model):
        self.denoiser = CachedDenoiser(model)
        self.states = {}

    def admit(self, key, ids):
        self.states[key] = self.denoiser.prefill(ids)
        return self.states[key].last_logits

    def run(self, key, block, commit):
        state = self.states[key]
        if not commit:
            return self.denoiser.denoise(state, block)
        # commit's causal pass, keeping every position's logits (commit itself keeps only the last)
        state.snap = None
        logits, state.cache = self.denoiser._run(block, state.length, None, state.cache, keep_last=False)
        state.length += len(block)
        return logits.float()


def _scenario(model, capacity=4, steps=10, block=4, seed=0, tolerance=TIGHT, growth=True):
    """Random admits (different lengths), releases, mixed commit/denoise steps in shuffled row order;
    returns the largest logit difference and whether every greedy token agreed."""
    rng = random.Random(seed)
    vocab = model.get_output_embeddings().weight.shape[0]
    batched, solo = SlotBatchDenoiser(model, capacity), Solo(model)
    live = {}  # slot → key in solo
    worst, greedy_equal, next_key = 0.0, True, 0

    def admit():
        nonlocal next_key, worst
        ids = [rng.randrange(vocab - 2) for _ in range(rng.randrange(1, 40))]
        slot, last = batched.admit(ids)
        ref = solo.admit(next_key, ids)
        worst = max(worst, (last - ref).abs().max().item())
        live[slot] = next_key
        next_key += 1

    for _ in range(capacity - 1):
        admit()
    for step in range(steps):
        if step % 3 == 2 and live:  # a sequence finishes, another arrives
            gone = rng.choice(sorted(live))
            batched.release(gone)
            del live[gone]
        while len(live) < capacity and rng.random() < 0.6:
            admit()
        slots = list(live)
        rng.shuffle(slots)
        if step % 4 == 3:
            slots = slots[:max(1, len(slots) - 1)]  # a forward over some of the live rows only
        rows = [Row(s, torch.tensor([rng.randrange(vocab) for _ in range(block)]), rng.random() < 0.5) for s in slots]
        out = batched.forward(rows)
        assert out.shape == (len(rows), block, vocab) and out.dtype == torch.float32
        for i, row in enumerate(rows):
            ref = solo.run(live[row.slot], row.block, row.commit)
            worst = max(worst, (out[i] - ref).abs().max().item())
            greedy_equal &= bool(torch.equal(out[i].argmax(-1), ref.argmax(-1)))
            assert batched.length(row.slot) == solo.states[live[row.slot]].length
    return worst, greedy_equal, batched


@pytest.fixture(params=[tiny_llama, tiny_qwen3, tiny_hybrid], ids=["llama", "qwen3", "hybrid"])
def model(request):
    return request.param()


def test_batched_rows_equal_batch_one_over_mixed_steps_releases_and_growth(model, monkeypatch):
    monkeypatch.setattr(batchcache, "CHUNK", 16)  # prompts up to 40 + 10 blocks must grow the buffers
    worst, greedy_equal, batched = _scenario(model, steps=12)
    assert worst <= TIGHT
    assert greedy_equal
    assert batched.slots.time > 16


def tiny_qwen3_next(seed=0):
    """Qwen3-Next: the other Gated-DeltaNet hybrid family (its own modeling code and cache use)."""
    from tinymodels import EOS_ID, _finish
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    torch.manual_seed(seed)
    config = Qwen3NextConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=32, intermediate_size=64,
        shared_expert_intermediate_size=32, num_experts_per_tok=2, num_experts=4, max_position_embeddings=512,
        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
        eos_token_id=EOS_ID, bos_token_id=1, pad_token_id=0)
    config._attn_implementation = "sdpa"
    config._experts_implementation = "eager"
    return _finish(Qwen3NextForCausalLM(config))


def test_qwen3_next_rows_equal_batch_one():
    worst, greedy_equal, _ = _scenario(tiny_qwen3_next(), steps=8, seed=7)
    assert worst <= TIGHT and greedy_equal


def test_single_token_blocks_take_the_one_token_paths_and_still_agree(model):
    worst, greedy_equal, _ = _scenario(model, steps=6, block=1, seed=3)
    assert worst <= TIGHT and greedy_equal


def test_a_wrong_write_offset_breaks_the_agreement(model, monkeypatch):
    monkeypatch.setattr(batchcache, "_write_offsets", lambda step: step.positions + 1)
    worst, _, _ = _scenario(model, steps=4)
    assert worst > 1e-3


def test_a_committing_row_masked_like_a_denoising_one_breaks_the_agreement(model, monkeypatch):
    from clovercode.engine import batchdenoiser

    right = batchdenoiser._block_masks

    def no_causal(step, dtype):
        step.commit = torch.zeros_like(step.commit)
        return right(step, dtype)

    monkeypatch.setattr(batchdenoiser, "_block_masks", no_causal)
    worst, _, _ = _scenario(model, steps=4)
    assert worst > 1e-3


def test_keeping_the_denoising_rows_linear_states_breaks_the_hybrid_agreement(monkeypatch):
    from clovercode.engine.batchcache import SlotCache

    right = SlotCache.settle

    def keep_every_row(self, cache, step, keep=True):
        step.commit_rows = torch.arange(step.phys.numel())
        return right(self, cache, step, keep)

    monkeypatch.setattr(SlotCache, "settle", keep_every_row)
    worst, _, _ = _scenario(tiny_hybrid(), steps=4)
    assert worst > 1e-3


def test_forwards_over_all_rows_read_views_and_over_scattered_rows_gather(model, monkeypatch):
    from clovercode.engine.batchcache import SlotCache

    windows, right = [], SlotCache.step_cache

    def spy(self, step):
        windows.append(step.window)
        return right(self, step)

    monkeypatch.setattr(SlotCache, "step_cache", spy)
    batched = SlotBatchDenoiser(model, 4)
    windows.clear()  # the bias-route probe's forwards
    slots = [batched.admit([1 + i] * (3 + i))[0] for i in range(4)]
    batched.release(slots[1])  # the last row moves into the hole: live rows stay dense
    live = [s for s in slots if s != slots[1]]
    batched.forward([Row(s, torch.tensor([5, 6])) for s in reversed(live)])
    batched.forward([Row(s, torch.tensor([5, 6])) for s in (live[0], live[1])])  # rows 0 and 2
    assert windows == [(0, 3), None]
    assert sorted(batched.slots.phys.values()) == [0, 1, 2]


def test_grouped_heads_on_cpu_take_the_bias_route_and_it_gives_the_masked_logits(model):
    # the tiny models have 4 query heads over 2 key/value heads, on sdpa: the route pays. Two denoisers
    # with the same sequences, one forced onto the mask, run the same mixed steps (committing rows
    # advance a hybrid's linear states) and must agree bit for bit.
    routes = [SlotBatchDenoiser(model, 3), SlotBatchDenoiser(model, 3)]
    assert all(d.bias_route for d in routes)
    routes[1].bias_route = False
    slots = [[d.admit(list(range(1, n)))[0] for n in (6, 20, 11)] for d in routes]
    for step in range(3):
        outs = [d.forward([Row(s, torch.tensor([7 + step, 8, 9, 10]), (step + i) % 2 == 0) for i, s in enumerate(ss)])
                for d, ss in zip(routes, slots)]
        assert torch.equal(outs[0], outs[1])


def _bias_dropped(model):
    """The model with a forward that silently ignores ``position_bias`` (as eager attention would)."""
    right = model.forward
    model.forward = lambda *args, position_bias=None, **kwargs: right(*args, **kwargs)
    return model


def test_the_probe_refuses_the_bias_route_where_the_bias_is_ignored_and_the_mask_still_agrees(model):
    batched = SlotBatchDenoiser(_bias_dropped(model), 3)
    assert not batched.bias_route
    worst, greedy_equal, _ = _scenario(model, steps=4)
    assert worst <= TIGHT and greedy_equal


def test_without_the_probe_an_ignored_bias_breaks_the_agreement(model, monkeypatch):
    monkeypatch.setattr(SlotBatchDenoiser, "_probe_bias_route", lambda self: True)
    worst, _, _ = _scenario(_bias_dropped(model), steps=4)
    assert worst > 1e-3


def _counting_forwards(model):
    calls = []
    right = model.forward
    model.forward = lambda *args, **kwargs: calls.append(1) or right(*args, **kwargs)
    return calls


def test_prompts_admitted_together_equal_their_batch_one_prefills_and_decode_on(model):
    rng = random.Random(11)
    prompts = [[rng.randrange(VOCAB - 2) for _ in range(n)] for n in (9, 1, 23, 9)]
    batched, solo = SlotBatchDenoiser(model, 5), Solo(model)
    first, _ = batched.admit([5, 6, 7])  # a live row the joint prefill must not disturb
    solo.admit("first", [5, 6, 7])
    calls = _counting_forwards(model)
    admitted = batched.admit_many(prompts)
    attention_only = not batched.slots.has_linear  # a hybrid prefills one prompt at a time
    assert len(calls) == (1 if attention_only else len(prompts))
    assert len({slot for slot, _ in admitted} | {first}) == 5
    keys = {first: "first"}
    for i, ((slot, last), ids) in enumerate(zip(admitted, prompts)):
        keys[slot] = i
        assert batched.length(slot) == len(ids)
        assert (last - solo.admit(i, ids)).abs().max().item() <= TIGHT
    for step in range(4):  # every row's later passes see exactly its own prompt
        rows = [Row(slot, torch.tensor([rng.randrange(VOCAB) for _ in range(4)]), (step + slot) % 2 == 0) for slot in keys]
        out = batched.forward(rows)
        for i, row in enumerate(rows):
            assert (out[i] - solo.run(keys[row.slot], row.block, row.commit)).abs().max().item() <= TIGHT


@pytest.mark.parametrize("build", [tiny_llama, tiny_qwen3], ids=["llama", "qwen3"])
def test_a_shared_prompt_opening_is_computed_once_and_every_row_still_equals_its_prefill(build):
    rng = random.Random(12)
    opening = [rng.randrange(VOCAB - 2) for _ in range(30)]
    prompts = [opening + [rng.randrange(VOCAB - 2) for _ in range(n)] for n in (5, 1, 12)] + [opening[:20]]
    model = build()
    batched, solo = SlotBatchDenoiser(model, 4), Solo(model)
    calls = _counting_forwards(model)
    admitted = batched.admit_many(prompts)
    assert len(calls) == 2  # the 19 shared tokens (one left to the shortest prompt), then the rest
    for i, ((slot, last), ids) in enumerate(zip(admitted, prompts)):
        assert batched.length(slot) == len(ids)
        assert (last - solo.admit(i, ids)).abs().max().item() <= TIGHT
    rows = [Row(slot, torch.tensor([1, 2, 3, 4]), i % 2 == 0) for i, (slot, _) in enumerate(admitted)]
    for i, out in enumerate(batched.forward(rows)):
        assert (out - solo.run(i, rows[i].block, rows[i].commit)).abs().max().item() <= TIGHT


def test_a_shared_opening_that_is_not_copied_breaks_the_agreement(monkeypatch):
    monkeypatch.setattr(batchcache.SlotCache, "share", lambda self, source, targets, length: self.lengths.update(
        {slot: length for slot in targets}))
    model = tiny_qwen3()
    prompts = [list(range(1, 70)) + [80], list(range(1, 70)) + [90]]  # 69 shared: worth a forward
    (_, _), (_, last) = SlotBatchDenoiser(model, 2).admit_many(prompts)
    assert (last - CachedDenoiser(model).prefill(prompts[1]).last_logits).abs().max().item() > 1e-3


def test_a_joint_prefill_without_the_causal_row_mask_breaks_the_agreement(monkeypatch):
    # the rows' block mask, opened up: a prompt's positions see its later tokens and its padding
    monkeypatch.setattr(batchdenoiser, "_block_masks", lambda step, dtype: torch.zeros(
        (step.lengths.numel(), 1, step.block, step.kv_len), dtype=dtype))
    model = tiny_qwen3()
    batched = SlotBatchDenoiser(model, 3)
    (slot, last), _ = batched.admit_many([[1, 2, 3, 4], [5, 6]])
    assert (last - CachedDenoiser(model).prefill([1, 2, 3, 4]).last_logits).abs().max().item() > 1e-3


@pytest.mark.parametrize("build", [tiny_llama, tiny_hybrid], ids=["joint", "one-by-one"])
def test_admitting_too_many_or_empty_prompts_is_refused_and_changes_nothing(build):
    batched = SlotBatchDenoiser(build(), 3)
    batched.admit([1, 2])
    with pytest.raises(ValueError, match="3 prompts do not fit the 2 free slots|all 3 slots are taken"):
        batched.admit_many([[1], [2], [3]])
    with pytest.raises(ValueError, match="empty"):
        batched.admit_many([[1], []])
    assert len(batched.slots.lengths) == 1
    assert [s for s, _ in batched.admit_many([[4, 5], [6]])] == [1, 2]


def test_kept_positions_get_the_logits_of_a_full_forward_and_the_head_runs_on_them_alone(model):
    full, part = SlotBatchDenoiser(model, 3), SlotBatchDenoiser(model, 3)
    for d in (full, part):
        for n in (6, 20, 11):
            d.admit(list(range(1, n)))
    keeps = [torch.tensor([False, True, True, False]), None, torch.tensor([False, False, False, True])]
    rows = [Row(slot, torch.tensor([7, 8, 9, 10]), slot == 2, keep) for slot, keep in enumerate(keeps)]
    want = full.forward([Row(r.slot, r.block, r.commit) for r in rows])
    head_rows = []
    part.head.register_forward_hook(lambda module, args, out: head_rows.append(out.shape[:-1]))
    got = part.forward(rows)
    assert [tuple(shape) for shape in head_rows] == [(1, 2 + 4 + 1)]
    for i, keep in enumerate(keeps):
        keep = torch.ones(4, dtype=torch.bool) if keep is None else keep
        assert (got[i][keep] - want[i][keep]).abs().max().item() <= TIGHT
        assert not got[i][~keep].any()


def test_denoising_rows_leave_their_slots_bit_identical(model):
    batched = SlotBatchDenoiser(model, 3)
    slots = [batched.admit(list(range(1, n)))[0] for n in (6, 20, 11)]
    before = [[t.clone() for t in _tensors(layer)] for layer in batched.slots.layers]
    for _ in range(3):
        batched.forward([Row(s, torch.full((4,), VOCAB - 1)) for s in slots])
    for layer, saved in zip(batched.slots.layers, before):
        for live, old in zip(_tensors(layer), saved):
            assert torch.equal(_committed(live, batched), _committed(old, batched))
    assert [batched.length(s) for s in slots] == [5, 19, 10]


def _tensors(layer):
    return layer.buffers if isinstance(layer, batchcache.SlotKV) else [layer.conv, layer.recurrent]


def _committed(tensor, batched):
    """Only what the slots hold as committed: KV rows up to each length (scratch past it may change)."""
    if tensor.dim() == 4 and tensor.shape[2] == batched.slots.time:
        return torch.cat([tensor[row, :, :batched.length(slot)].flatten()
                          for row, slot in enumerate(batched.slots.slot_at)])
    return tensor


def test_release_frees_the_slot_for_the_next_admit_and_full_slots_are_refused():
    batched = SlotBatchDenoiser(tiny_llama(), 2)
    first, _ = batched.admit([1, 2, 3])
    second, _ = batched.admit([4, 5])
    with pytest.raises(ValueError, match="all 2 slots"):
        batched.admit([6])
    batched.release(first)
    batched.release(first)  # already free: ignored
    batched.release(99)  # unknown: ignored
    again, _ = batched.admit([7, 8, 9, 10])
    assert again == first and batched.length(again) == 4 and batched.length(second) == 2


def test_bad_rows_are_refused_with_a_clear_error():
    batched = SlotBatchDenoiser(tiny_qwen3(), 3)
    a, _ = batched.admit([1, 2, 3])
    b, _ = batched.admit([4, 5])
    with pytest.raises(ValueError, match="holds no sequence"):
        batched.forward([Row(2, torch.tensor([1, 2]))])
    with pytest.raises(ValueError, match="only once"):
        batched.forward([Row(a, torch.tensor([1, 2])), Row(a, torch.tensor([3, 4]))])
    with pytest.raises(ValueError, match="same, non-zero length"):
        batched.forward([Row(a, torch.tensor([1, 2])), Row(b, torch.tensor([3]))])
    with pytest.raises(ValueError, match="at least one row"):
        batched.forward([])


def test_sliding_window_layers_are_refused_when_the_denoiser_is_built():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, use_sliding_window=True,
                         sliding_window=8, max_window_layers=0, attn_implementation="sdpa")
    with pytest.raises(UnsupportedCache, match="DynamicSlidingWindowLayer"):
        SlotBatchDenoiser(Qwen3ForCausalLM(config).eval(), 2)


@pytest.mark.slow
def test_clover_tiny_batched_rows_equal_batch_one():
    from rich.console import Console

    from clovercode.engine.config import EngineConfig
    from clovercode.engine.engine import Engine

    engine = Engine.open("clover-tiny", EngineConfig(), Console(file=open("/dev/null", "w")))
    worst, greedy_equal, _ = _scenario(engine.model, capacity=6, steps=8, block=16, seed=5)
    # float32: batched matmuls round differently from batch-1 ones (measured ≈ 1e-5 on logits of ≈ 10)
    assert worst <= 1e-3
    assert greedy_equal


def test_the_micro_benchmark_times_both_sides_on_the_same_rows():
    from clovercode.bench.batchforward import measure_batch_forward

    timing = measure_batch_forward(tiny_llama(), rows=3, block=4, prompt_tokens=(4, 20), repeats=1)
    assert (timing.rows, timing.block, len(timing.prompt_tokens)) == (3, 4, 3)
    assert all(4 <= n <= 20 for n in timing.prompt_tokens)
    assert timing.batched_s > 0 and timing.solo_s > 0 and timing.speedup == timing.solo_s / timing.batched_s

"""Grouped-query attention under masks (engine/attention.py): every route equals the plain path (keys
and values repeated per query head), the probe picks in its order, no key is repeated once installed,
and whole decodes (tokens and every logit) are bit-identical in float32 on clover-tiny and the tiny
hybrid Qwen3.5-MoE through the cached, static and batched denoisers."""

import pytest
import torch

from clovercode.engine import attention
from clovercode.engine.batchdenoiser import SlotBatchDenoiser
from clovercode.engine.batchseam import Row
from clovercode.engine.decoder import DecodePlan, decode
from clovercode.engine.denoiser import PROBED, CachedDenoiser
from clovercode.engine.graphs import StaticDenoiser
from clovercode.engine.sources import tiny_model_dir
from clovercode.engine.stops import Stops
from tinymodels import EOS_ID, MASK_ID, tiny_hybrid


def case(dtype=torch.float32, rows=3, heads=4, kv_heads=2, block=16, keys=300, dim=16):
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(rows, heads, block, dim, generator=generator, dtype=dtype)
    k = torch.randn(rows, kv_heads, keys, dim, generator=generator, dtype=dtype)
    v = torch.randn(rows, kv_heads, keys, dim, generator=generator, dtype=dtype)
    prefix = torch.tensor([100, keys - block, 7][:rows])
    mask = attention.row_mask(prefix, torch.tensor([False, True, True][:rows]), block, keys, dtype)
    return q, k, v, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_grouped_sdpa_equals_the_repeated_heads_bit_for_bit_on_cpu(dtype):
    q, k, v, mask = case(dtype)
    assert torch.equal(attention._sdpa_gqa(q, k, v, mask, 0.125), attention._plain(q, k, v, mask, 0.125, 2))


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_with_a_block_mask_equals_the_plain_path_and_is_made_once_per_mask():
    q, k, v, mask = case()
    first = attention.block_mask(mask, 3)
    assert attention.block_mask(mask, 3) is first  # every layer of a forward shares it
    assert attention.block_mask(mask.clone(), 3) is not first
    got = attention._flex(q, k, v, mask, None)  # uncompiled on CPU: the same block mask, unfused
    assert (got - attention._plain(q, k, v, mask, None, 2)).abs().max() < 1e-5


def fake_flash(q, k, v, cache_seqlens, cache_batch_idx, softmax_scale, causal):
    """flash_attn_with_kvcache's contract on CPU: (B, L, H, D) queries, row i reads cache row
    cache_batch_idx[i] up to cache_seqlens[i], causal queries aligned to the end of those keys."""
    out = []
    for i, row in enumerate(cache_batch_idx.tolist()):
        n, block = int(cache_seqlens[i]), q.shape[1]
        mask = attention.row_mask(torch.tensor([n - block]), torch.tensor([causal]), block, n, q.dtype)
        out.append(torch.nn.functional.scaled_dot_product_attention(
            q[i:i + 1].transpose(1, 2), k[row:row + 1, :n].transpose(1, 2), v[row:row + 1, :n].transpose(1, 2),
            attn_mask=mask, scale=softmax_scale, enable_gqa=True).transpose(1, 2))
    return torch.cat(out)


def test_flash_kvcache_reads_each_row_up_to_its_length_and_equals_the_plain_path():
    q, k, v, mask = case()
    lengths, causal = attention._rows(mask)
    assert lengths.tolist() == [116, 300, 23] and causal.tolist() == [False, True, True]
    got = attention._flash_kvcache(q, k, v, mask, None, kernel=fake_flash)
    assert (got - attention._plain(q, k, v, mask, None, 2)).abs().max() < 1e-5
    other = mask.clone()
    other[0, 0, 3, 5] = torch.finfo(torch.float32).min  # a hole no row mask has
    assert attention._rows(other) is None
    with pytest.raises(ValueError, match="engine's shape"):
        attention._flash_kvcache(q, k, v, other, None, kernel=fake_flash)


def test_the_probe_takes_the_first_available_exact_route_and_says_why_it_skipped_the_others(monkeypatch):
    cpu = torch.device("cpu")
    choice = attention.probe(cpu, torch.float32, 16, 2, 256)
    assert choice.route == "sdpa_gqa" and "flex: CUDA only" in choice.why
    assert attention.probe(cpu, torch.float32, 16, 2, 64, routes=("flash_kvcache", "plain")).route == "plain"
    monkeypatch.setitem(attention._ROUTE_FUNCTIONS, "sdpa_gqa", lambda q, k, v, m, s: attention._sdpa_gqa(q, k, v, m, s) + 1e-3)
    refused = attention.probe(cpu, torch.float32, 16, 2, 64)
    assert refused.route == "plain" and "sdpa_gqa: differs" in refused.why
    monkeypatch.setattr(torch, "_fused_sdp_choice", lambda *a, **k: 0)  # a torch that would run the math kernel
    assert "math kernel" in attention.probe(cpu, torch.float32, 16, 2, 64).why


def test_models_without_grouped_heads_or_not_on_sdpa_keep_their_attention():
    from transformers import LlamaConfig, LlamaForCausalLM

    plain = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=4, attn_implementation="sdpa"))
    assert attention.install(plain).route == "plain" and plain.config._attn_implementation == "sdpa"
    plain.config._attn_implementation = "eager"
    assert "not sdpa" in attention.install(plain).why


# -- whole decodes, installed against plain sdpa, float32 -----------------------------------------

def clover_tiny():
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(), dtype=torch.float32, attn_implementation="sdpa")
    return model.eval()


@pytest.fixture(scope="module", params=["clover-tiny", "hybrid"])
def model(request):
    model = clover_tiny() if request.param == "clover-tiny" else tiny_hybrid(dtype=torch.float32)
    setattr(model, PROBED, False)  # denoising passes carry the block mask (the path this is about)
    return model


class Recording:
    """A denoiser that keeps every logits tensor it hands out."""

    def __init__(self, inner):
        self.inner, self.logits = inner, []

    def prefill(self, ids):
        state = self.inner.prefill(ids)
        self.logits.append(state.last_logits.clone())
        return state

    def denoise(self, state, block):
        out = self.inner.denoise(state, block)
        self.logits.append(out.clone())
        return out

    def commit(self, state, block):
        state = self.inner.commit(state, block)
        self.logits.append(state.last_logits.clone())
        return state


def decode_both(model, make):
    """(plain, grouped) decodes of the same prompt: (tokens, logits of every pass)."""
    mask_id = getattr(model.config, "mask_token_id", None) or MASK_ID
    plan = DecodePlan(block_size=8, mask_id=mask_id, strategy="threshold", threshold=0.6, max_new_tokens=24)
    prompt = [(7 * i + 3) % 90 + 4 for i in range(40)]
    results = []
    for implementation in ("sdpa", "grouped"):
        if implementation == "sdpa":
            model.set_attn_implementation("sdpa")
        else:
            assert attention.install(model).route == "sdpa_gqa"
        recording = Recording(make(model))
        result = decode(recording, prompt, plan, lambda ids: " ".join(map(str, ids)), Stops(frozenset({EOS_ID})))
        results.append((result.tokens, recording.logits))
    model.set_attn_implementation("sdpa")
    return results


@pytest.mark.parametrize("make", [lambda m: CachedDenoiser(m), lambda m: StaticDenoiser(m, graphs=False)],
                         ids=["cached", "static"])
def test_whole_decodes_are_bit_identical_with_grouped_masked_attention(model, make):
    (plain_tokens, plain_logits), (tokens, logits) = decode_both(model, make)
    assert tokens == plain_tokens and len(tokens) > 8
    assert len(logits) == len(plain_logits) and all(torch.equal(a, b) for a, b in zip(logits, plain_logits))


def test_batched_forwards_are_bit_identical_and_repeat_no_keys(model, monkeypatch):
    from transformers.integrations import sdpa_attention

    repeats = []
    real = sdpa_attention.repeat_kv
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda h, n: repeats.append(n) or real(h, n))
    outputs = {}
    for implementation in ("sdpa", "grouped"):
        if implementation == "sdpa":
            model.set_attn_implementation("sdpa")
        else:
            attention.install(model)
        batched = SlotBatchDenoiser(model, 3)
        batched.bias_route = False  # the plain path: the mask as a mask
        slots = [batched.admit([(5 * i + j) % 90 + 4 for j in range(n)])[0] for i, n in enumerate((9, 30, 17))]
        repeats.clear()
        logits = [batched.forward([Row(s, torch.tensor([MASK_ID % 90 + 3] * 4), (step + i) % 2 == 0)
                                   for i, s in enumerate(slots)]) for step in range(3)]
        outputs[implementation] = (logits, list(repeats))
    model.set_attn_implementation("sdpa")
    (plain, plain_repeats), (grouped, grouped_repeats) = outputs["sdpa"], outputs["grouped"]
    assert plain_repeats and not grouped_repeats  # the plain path copies keys per head; the grouped one never
    assert all(torch.equal(a, b) for a, b in zip(plain, grouped))


def test_models_loaded_by_the_engine_use_the_route_and_a_plain_fallback_is_a_note(monkeypatch):
    import io

    from rich.console import Console

    from clovercode.engine.config import EngineConfig
    from clovercode.engine.engine import Engine

    engine = Engine.open("clover-tiny", EngineConfig(), Console(file=io.StringIO()))
    assert engine.model.config._attn_implementation == attention.NAME
    assert engine.model._clovercode_attention.route == "sdpa_gqa"
    monkeypatch.setattr(attention, "probe", lambda *a, **k: attention.Choice("plain", "sdpa_gqa: differs"))
    out = io.StringIO()
    engine = Engine.open("clover-tiny", EngineConfig(), Console(file=out, width=300))
    assert engine.model.config._attn_implementation == "sdpa"
    assert "note: masked attention repeats keys and values per query head here (sdpa_gqa: differs)" in out.getvalue()

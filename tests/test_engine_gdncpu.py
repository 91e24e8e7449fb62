"""The gated delta rule's CPU kernel (engine/gdncpu.py, engine/native/gdn_recurrent.c): built by the machine's
real compiler, equal to a float64 token-by-token recurrence (and to transformers' fallbacks) to float32
rounding, independent of how a sequence is split into calls and of the rows beside it; installed by the
loader on the CPU for transformers' own modules only; everything it does not take goes to the fallback."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from clovercode.engine import gdncpu, gdnkernels  # noqa: E402

modeling = pytest.importorskip("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe")


@pytest.fixture(scope="module")
def lib():
    built = gdncpu.library()
    if built is None:
        pytest.skip("no C compiler here: the kernel is not built (transformers' fallbacks run)")
    return built


@pytest.fixture
def restored(monkeypatch):
    """transformers' module globals as they were, whatever a test installs."""
    for name in gdncpu.NAMES:
        monkeypatch.setattr(modeling, name, getattr(modeling, name))
    return modeling


def _inputs(batch, tokens, key_heads, value_heads, dk, dv, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(batch, tokens, key_heads, dk, generator=gen).to(dtype) for _ in range(2))
    v = torch.randn(batch, tokens, value_heads, dv, generator=gen).to(dtype)
    g = -torch.rand(batch, tokens, value_heads, generator=gen) * 2
    beta = torch.rand(batch, tokens, value_heads, generator=gen).to(dtype)
    state = torch.randn(batch, value_heads, dk, dv, generator=gen) * 0.1
    return q, k, v, g, beta, state


def _reference(q, k, v, g, beta, state, l2norm):
    """The recurrence written out in float64, one token and one head at a time."""
    q, k, v, g, beta = (t.double() for t in (q, k, v, g, beta))
    per_key = v.shape[2] // q.shape[2]
    s = state.double().clone() if state is not None else torch.zeros(
        v.shape[0], v.shape[2], q.shape[3], v.shape[3], dtype=torch.float64)
    out = torch.zeros_like(v)
    for b in range(v.shape[0]):
        for h in range(v.shape[2]):
            for t in range(v.shape[1]):
                qt, kt = q[b, t, h // per_key], k[b, t, h // per_key]
                if l2norm:
                    qt, kt = qt / torch.sqrt((qt * qt).sum() + 1e-6), kt / torch.sqrt((kt * kt).sum() + 1e-6)
                qt = qt / q.shape[3] ** 0.5
                s[b, h] *= torch.exp(g[b, t, h])
                delta = (v[b, t, h] - kt @ s[b, h]) * beta[b, t, h]
                s[b, h] += torch.outer(kt, delta)
                out[b, t, h] = qt @ s[b, h]
    return out, s


@pytest.mark.parametrize("dv", [48, 128])  # 48: the portable slab; 128: two AVX-512 slabs where there are
@pytest.mark.parametrize("l2norm,initial", [(True, True), (False, False)])
def test_the_kernel_is_the_recurrence(lib, dv, l2norm, initial):
    q, k, v, g, beta, state = _inputs(2, 7, 2, 4, 32, dv)
    state = state if initial else None
    before = state.clone() if initial else None
    got, final = gdncpu.gated_delta_rule(q, k, v, g, beta, state, True, l2norm, lib)
    want, want_state = _reference(q, k, v, g, beta, state, l2norm)
    assert got.dtype == torch.float32 and final.dtype == torch.float32
    assert (got.double() - want).abs().max() <= 1e-5 * want.abs().max()
    assert (final.double() - want_state).abs().max() <= 1e-5 * want_state.abs().max()
    if initial:
        assert torch.equal(state, before)  # read, never written: the cache keeps its copy
    # transformers' own fallbacks agree to the same rounding
    ref_out, ref_state = modeling.torch_recurrent_gated_delta_rule(
        q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=l2norm)
    assert (got - ref_out).abs().max() <= 1e-4 * ref_out.abs().max()
    assert (final - ref_state).abs().max() <= 1e-4 * ref_state.abs().max()


def test_a_sequence_split_into_calls_and_a_row_among_others_give_the_same_bits(lib):
    """Unlike the chunked fallback (whose chunks depend on where a call starts), the kernel runs the same
    arithmetic for a token however the sequence was cut into prefill chunks and blocks, and a row's
    result does not depend on the batch it decodes in."""
    q, k, v, g, beta, state = _inputs(3, 12, 2, 4, 16, 64, seed=1)
    whole, last = gdncpu.gated_delta_rule(q, k, v, g, beta, state, True, True, lib)
    first, middle = gdncpu.gated_delta_rule(q[:, :5], k[:, :5], v[:, :5], g[:, :5], beta[:, :5], state, True, True, lib)
    rest, end = gdncpu.gated_delta_rule(q[:, 5:], k[:, 5:], v[:, 5:], g[:, 5:], beta[:, 5:], middle, True, True, lib)
    assert torch.equal(torch.cat([first, rest], dim=1), whole) and torch.equal(end, last)
    alone, alone_last = gdncpu.gated_delta_rule(q[1:2], k[1:2], v[1:2], g[1:2], beta[1:2], state[1:2], True, True, lib)
    assert torch.equal(alone, whole[1:2]) and torch.equal(alone_last, last[1:2])


def test_what_the_kernel_does_not_take_goes_to_the_fallback(lib, monkeypatch):
    seen = []

    def fallback(*args, **kwargs):
        seen.append(kwargs.get("cu_seqlens"))
        return "fallback", None

    wrapped = gdncpu._wrapping(fallback)
    q, k, v, g, beta, state = _inputs(1, 3, 1, 2, 16, 16)
    assert wrapped(q, k, v, g=g, beta=beta, cu_seqlens=torch.tensor([0, 3]))[0] == "fallback"  # packed rows
    assert wrapped(q.double(), k.double(), v.double(), g=g.double(), beta=beta.double())[0] == "fallback"
    assert wrapped(q, k, v[:, :, :1], g=g, beta=beta)[0] == "fallback"  # heads that do not divide
    out, final = wrapped(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=False)
    assert out.shape == v.shape and final is None and len(seen) == 3
    monkeypatch.setattr(gdncpu, "library", lambda: None)  # no compiler, or CLOVERCODE_GDN_KERNEL=torch
    assert wrapped(q, k, v, g=g, beta=beta)[0] == "fallback"


def test_the_switch_keeps_the_fallbacks(monkeypatch):
    monkeypatch.setenv(gdncpu.SWITCH, "torch")
    gdncpu.library.cache_clear()
    try:
        assert gdncpu.library() is None
    finally:
        monkeypatch.delenv(gdncpu.SWITCH)
        gdncpu.library.cache_clear()


def test_installed_for_transformers_modules_on_the_cpu_and_named_in_the_summary(lib, restored):
    from tinymodels import VOCAB, tiny_hybrid

    model = tiny_hybrid(dtype=torch.float32)
    ids = (torch.arange(1, 20).unsqueeze(0) * 7) % VOCAB
    with torch.no_grad():
        want = model(ids).logits
    assert not gdncpu.install(model, "cuda")  # off the CPU: fla's kernels or the fallbacks, as transformers picks
    assert gdncpu.install(model, "cpu") and gdncpu.install(model, "cpu")  # idempotent: wrapped once
    assert restored.torch_chunk_gated_delta_rule._clovercode_native is not None
    assert getattr(restored.torch_chunk_gated_delta_rule._clovercode_native, "_clovercode_native", None) is None
    in_use = gdnkernels.kernels_in_use(model)
    assert in_use["torch_chunk_gated_delta_rule"] == in_use["torch_recurrent_gated_delta_rule"] == "clovercode"
    assert gdnkernels.summary("cpu", in_use).startswith("GDN: clovercode's CPU kernel")
    with torch.no_grad():
        got = model(ids).logits
    assert (got - want).abs().max() <= 1e-4 * want.abs().max()


def test_a_model_s_own_code_is_never_patched(lib, monkeypatch):
    """A model that ships code (trust_remote_code) may mean something else by the same names: its module
    is left as it is."""
    import types

    own = types.ModuleType("transformers_modules.someone.modeling_hybrid")
    own.torch_chunk_gated_delta_rule = own.torch_recurrent_gated_delta_rule = lambda *a, **k: None

    class OwnGatedDeltaNet(torch.nn.Module):
        pass

    OwnGatedDeltaNet.__module__ = own.__name__
    monkeypatch.setitem(__import__("sys").modules, own.__name__, own)
    model = torch.nn.Sequential(OwnGatedDeltaNet())
    assert not gdncpu.install(model, "cpu")
    assert not hasattr(own.torch_chunk_gated_delta_rule, "_clovercode_native")

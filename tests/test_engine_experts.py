"""Quantized MoE experts without a per-expert Python loop (engine/groupedexperts.py, engine/expertpath.py):
each path equals the reference loop, a layer dispatches a bounded number of tensor operations whatever
the number of experts its tokens hit, the fixed-capacity path keeps every shape static (CUDA graphs),
float8's grouped scaled GEMM is checked against a stand-in for the CUDA kernel, and no CUDA choice is
the loop."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from clovercode.engine import expertpath, groupedexperts, qexperts  # noqa: E402

MODES = ("int8", "int4", "fp8")
OPS_PER_LAYER = 40  # issue 44: routing and experts of one MoE layer, whatever the number of experts hit


class Dispatched(TorchDispatchMode):
    """Every aten operation dispatched (views included), with its output's shape."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        first = out[0] if isinstance(out, (tuple, list)) else out
        self.ops.append((str(func), tuple(first.shape) if isinstance(first, torch.Tensor) else ()))
        return out


def _layer(experts: int = 16, hidden: int = 64, inner: int = 32, top_k: int = 4, seed: int = 0):
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeExperts, Qwen3_5MoeTopKRouter

    torch.manual_seed(seed)
    config = Qwen3_5MoeTextConfig(hidden_size=hidden, moe_intermediate_size=inner, num_experts=experts,
                                  num_experts_per_tok=top_k)
    config._experts_implementation = "grouped_mm"
    fused, router = Qwen3_5MoeExperts(config), Qwen3_5MoeTopKRouter(config)
    with torch.no_grad():
        fused.gate_up_proj.normal_(0, 0.05)
        fused.down_proj.normal_(0, 0.05)
        router.weight.normal_(0, 0.05)
    return fused, router


def _routing(tokens: int, experts: int, top_k: int, spread: bool, dtype=torch.float32):
    """Top-k picks hitting every expert (spread) or only the first top_k (a block whose tokens agree)."""
    if spread:
        index = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)])
    else:
        index = torch.stack([torch.randperm(top_k) for _ in range(tokens)])
    return index, torch.softmax(torch.randn(tokens, top_k), -1).to(dtype)


# float32 takes torch's grouped GEMM, float64 the padded batched matmul (one mode is enough for that)
@pytest.mark.parametrize("mode,dtype", [(m, torch.float32) for m in MODES] + [("int4", torch.float64)])
def test_the_grouped_paths_equal_the_reference_loop(mode, dtype):
    fused, _ = _layer()
    module = qexperts.QuantizedExperts(fused, mode, dtype)
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    for tokens, spread in ((1, True), (5, False), (12, True)):
        hidden = torch.randn(tokens, 64, dtype=dtype)
        index, weights = _routing(tokens, 16, 4, spread, dtype)
        with torch.no_grad():
            want = module.reference(hidden, index, weights)
            for capacity in (None, min(16, index.numel())):
                got = groupedexperts.dequant_grouped(module, hidden, index, weights, capacity)
                assert got.dtype == dtype and got.shape == want.shape
                assert (got - want).abs().max() <= tolerance * want.abs().max(), (tokens, capacity)
            got = module(hidden, index, weights)  # the module's own choice on the CPU: the exact hit set
            if module.path(hidden.device).name == "dequant_grouped":
                assert torch.equal(got, groupedexperts.dequant_grouped(module, hidden, index, weights))
            else:  # int8 in float32: multiplied as stored (engine/int8cpu.py)
                assert (got - want).abs().max() <= tolerance * want.abs().max(), tokens


def test_a_second_layer_reuses_the_cpu_workspace_without_clobbering_the_first_layers_result():
    first, second = (qexperts.QuantizedExperts(_layer(seed=s)[0], "int4", torch.float32) for s in (1, 2))
    hidden = torch.randn(6, 64)
    index, weights = _routing(6, 16, 4, True)
    with torch.no_grad():
        a = first(hidden, index, weights)
        kept = a.clone()
        second(hidden, index, weights)
        assert torch.equal(a, kept)
        assert torch.allclose(a, first.reference(hidden, index, weights), atol=1e-5)


def _count(module, router, hidden):
    with torch.no_grad(), Dispatched() as seen:
        _, weights, index = router(hidden)
        module(hidden, index, weights)
    return [name for name, _ in seen.ops]


@pytest.mark.parametrize("mode", ("none", *MODES))
def test_a_moe_layer_dispatches_at_most_40_operations_however_many_experts_it_hits(mode):
    fused, router = _layer(experts=64, top_k=8)
    module = fused if mode == "none" else qexperts.QuantizedExperts(fused, mode, torch.float32)
    # 1 token hits 8 experts; 32 tokens with these weights hit nearly all 64. The first pass sizes the
    # CPU workspace (an allocation a layer, once); the counts are the steady state's
    _count(module, router, torch.randn(512, 64) * 4)
    few, many = _count(module, router, torch.randn(1, 64)), _count(module, router, torch.randn(32, 64) * 4)
    hits = router(torch.randn(32, 64) * 4)[2].unique().numel()
    assert hits > 24
    assert len(few) == len(many) <= OPS_PER_LAYER, many
    if mode != "none":
        assert sum("grouped_mm" in name for name in many) == 2  # one grouped GEMM for each projection


def test_the_fixed_capacity_path_keeps_every_shape_static_whatever_the_routing():
    """What a CUDA graph needs: the same operations over the same shapes for any routing (no unique,
    no host read-back), so one recorded pass replays for the next block."""
    fused, _ = _layer()
    for mode in MODES:
        module = qexperts.QuantizedExperts(fused, mode, torch.float32)
        qexperts.make_capturable(torch.nn.Sequential(module))
        assert module.path(torch.device("cpu")) == expertpath.ExpertPath(
            "dequant_grouped_fixed", "CUDA graphs need static shapes: fixed expert capacity")
        hidden = torch.randn(3, 64)
        traces = []
        for spread in (False, True):  # 4 experts hit, then 12 of 16
            index, weights = _routing(3, 16, 4, spread)
            with torch.no_grad(), Dispatched() as seen:
                got = module(hidden, index, weights)
            assert torch.allclose(got, module.reference(hidden, index, weights), atol=1e-5)
            traces.append(seen.ops)
            assert not any("unique" in name or "nonzero" in name or "item" in name for name, _ in seen.ops)
        assert traces[0] == traces[1]


def test_float8_experts_run_the_grouped_scaled_gemm_with_its_layouts_and_scales():
    """torch._scaled_grouped_mm has no CPU kernel: a plain stand-in with its signature checks that the
    stored weights, transposed, are the column-major operand and their row scales its column scales."""
    fused, _ = _layer()
    module = qexperts.QuantizedExperts(fused, "fp8", torch.bfloat16)
    hidden = torch.randn(10, 64, dtype=torch.bfloat16)
    index, weights = _routing(10, 16, 4, True, torch.bfloat16)
    calls = []

    def stand_in(a, b, scale_a, scale_b, offs, out_dtype):
        calls.append((a.dtype, b.dtype, b.stride(), scale_a.dtype, scale_b.shape, offs.dtype))
        return groupedexperts.reference_scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype)

    with torch.no_grad():
        got = groupedexperts.scaled_grouped(module, hidden, index, weights, scaled_mm=stand_in)
        want = module.reference(hidden.float(), index, weights.float())
    assert len(calls) == 2 and all(c[0] == c[1] == torch.float8_e4m3fn for c in calls)
    assert calls[0][2][-2] == 1  # column-major [E, in, out]
    assert calls[0][4] == (16, 64) and calls[0][5] == torch.int32
    # the activations' own float8 rounding on top of the weights': a few per cent, as fp8 inference is
    assert (got.float() - want).norm() / want.norm() < 0.08


CAPABILITIES = (None, (7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0))
KERNELS = [frozenset(s) for s in ((), ("grouped_mm",), ("scaled_grouped_mm",), ("grouped_mm", "scaled_grouped_mm"),
                                  ("grouped_mm", "scaled_grouped_mm", "weight_int8pack_mm"))]


def test_no_cuda_choice_is_the_per_expert_loop_and_each_chain_ends_in_a_path_that_needs_no_optional_kernel():
    for capability, mode, available, graphs in itertools.product(CAPABILITIES, ("none", *MODES), KERNELS, (False, True)):
        path = expertpath.choose("cuda", capability, mode, available, graphs)
        assert path.name in expertpath.PATHS and path.name != expertpath.LOOP
        if graphs:
            assert path.capturable, (capability, mode, available)
        chain = expertpath.candidates("cuda", capability, mode, graphs)
        assert chain[-1].name in ("batched_mm", "dequant_grouped", "dequant_grouped_fixed")
        # its call per hit expert would be a launch each on a GPU: a CPU-only path
        assert "int8_grouped_mm" not in {p.name for p in chain}
    hopper = frozenset({"grouped_mm", "scaled_grouped_mm"})
    assert expertpath.choose("cuda", (9, 0), "fp8", hopper).name == "scaled_grouped_mm"
    assert expertpath.choose("cuda", (8, 9), "fp8", hopper).name == "dequant_grouped"  # Ada: no grouped fp8 GEMM
    assert expertpath.choose("cuda", (10, 0), "fp8", hopper).name == "scaled_grouped_mm"  # B200
    assert expertpath.choose("cuda", (12, 0), "fp8", hopper).name == "dequant_grouped"  # RTX 50xx: not built there
    assert expertpath.choose("cuda", (9, 0), "int4", hopper).name == "dequant_grouped"
    assert expertpath.choose("cuda", (9, 0), "none", hopper).name == "grouped_mm"
    assert expertpath.choose("cuda", (7, 5), "none", hopper).name == "batched_mm"  # pre-Ampere: no grouped GEMM
    assert expertpath.choose("cpu", None, "int8", hopper).name == "dequant_grouped"  # no int8 kernel in this torch
    cpu = frozenset({"grouped_mm", "weight_int8pack_mm"})
    assert expertpath.choose("cpu", None, "int8", cpu).name == "int8_grouped_mm"
    assert expertpath.choose("cpu", None, "int8", cpu, graphs=True).name == "dequant_grouped_fixed"
    assert expertpath.choose("cpu", None, "int4", cpu).name == "dequant_grouped"
    assert expertpath.choose("cpu", None, "fp8", hopper).name == "dequant_grouped"


def test_unquantized_experts_leave_the_grouped_gemm_for_the_batched_matmul_only_before_ampere():
    from tinymodels import VOCAB, tiny_hybrid

    model = tiny_hybrid(dtype=torch.float32)
    ids = torch.arange(1, 9).unsqueeze(0) % VOCAB
    with torch.no_grad():
        want = model(ids).logits
    assert expertpath.apply_unquantized(model, "cuda", (9, 0)) is None  # transformers' grouped GEMM stays
    assert expertpath.apply_unquantized(model, "cuda", (7, 5)) == "batched_mm"
    assert model.config._experts_implementation == "batched_mm"
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, want, atol=1e-4)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_int8_experts_on_the_cpu_are_multiplied_as_stored_and_equal_the_reference(dtype):
    """The CPU's int8 path (engine/int8cpu.py): the module chooses it, its result is the reference's on the
    same int8 weights, and inside its operator no weight is ever written out in floating point (the old
    path wrote every hit expert as a bf16 copy): each hit expert is one int8 kernel call over its rows."""
    from clovercode.engine import int8cpu

    fused, _ = _layer()
    module = qexperts.QuantizedExperts(fused, "int8", dtype)
    assert module.path(torch.device("cpu")).name == "int8_grouped_mm"
    hidden = torch.randn(12, 64, dtype=dtype)
    index, weights = _routing(12, 16, 4, True, dtype)
    with torch.no_grad():
        # the reference's arithmetic in float32 on the same int8 weights and scales
        want = qexperts.QuantizedExperts.reference(_as_float32(module), hidden.float(), index, weights.float())
        got = module(hidden, index, weights)
        assert got.dtype == dtype and got.shape == want.shape
        tolerance = 1e-5 if dtype == torch.float32 else 2e-2  # bf16: its rounding of the activations
        assert (got.float() - want).abs().max() <= tolerance * want.abs().max()
        route = groupedexperts.Route(index, weights, 16, None)
        one_expert = module._buffers["gate_up_proj_qdata"][0].numel()
        with Written() as seen:
            int8cpu._grouped(hidden[route.tokens], module._buffers["gate_up_proj_qdata"],
                             module._buffers["gate_up_proj_scale"], route.hit, route.offsets, native=False)
    assert sum("_weight_int8pack_mm" in name for name, _ in seen.ops) == route.hit.numel()
    # what it writes: its output and each expert's rows, never a matrix the size of an expert's weights
    assert seen.ops and all(numel < one_expert for _, numel in seen.ops), seen.ops
    # many rows on one expert (40 tokens all on the same 4): widened once into the workspace, one matmul
    crowd = torch.randn(40, 64, dtype=dtype)
    index, weights = _routing(40, 16, 4, False, dtype)
    with torch.no_grad():
        want = qexperts.QuantizedExperts.reference(_as_float32(module), crowd.float(), index, weights.float())
        got = module(crowd, index, weights)
    assert (got.float() - want).abs().max() <= tolerance * want.abs().max()


def test_int8_experts_in_bf16_take_the_native_kernel_where_it_is_built_and_equal_the_reference(monkeypatch):
    """At widths the native kernel takes (in 128, inner 64: engine/int8native.py), both projections run in it
    (torch's per-expert kernel is never called) and the layer's output is the reference's on the same int8
    weights, at the tolerance of the torch path above."""
    from clovercode.engine import int8cpu, int8native

    if int8native.library() is None:
        pytest.skip("no C compiler or no AVX-512 here: torch's kernel runs (the test above)")
    fused, _ = _layer(hidden=128, inner=64)
    module = qexperts.QuantizedExperts(fused, "int8", torch.bfloat16)
    hidden = torch.randn(12, 128, dtype=torch.bfloat16)
    index, weights = _routing(12, 16, 4, True, torch.bfloat16)
    called = []
    monkeypatch.setattr(torch, "_weight_int8pack_mm", lambda *a: called.append(a))
    with torch.no_grad():
        got = module(hidden, index, weights)
        want = qexperts.QuantizedExperts.reference(_as_float32(module), hidden.float(), index, weights.float())
    assert not called and "native" in int8cpu.kernel()
    assert (got.float() - want).abs().max() <= 2e-2 * want.abs().max()


class Written(TorchDispatchMode):
    """The floating-point tensors each operation writes (views, which write nothing, left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        first = out[0] if isinstance(out, (tuple, list)) else out
        if isinstance(first, torch.Tensor) and first.is_floating_point() and first._base is None:
            self.ops.append((str(func), first.numel()))
        return out


def _as_float32(module):
    """The same int8 weights with float32 scales: the reference loop then computes in float32."""
    copy = qexperts.QuantizedExperts.__new__(qexperts.QuantizedExperts)
    torch.nn.Module.__init__(copy)
    copy.num_experts, copy.act_fn = module.num_experts, module.act_fn
    for name, tensor in module._buffers.items():
        copy.register_buffer(name, tensor.float() if name.endswith("_scale") else tensor)
    return copy


def test_int8_experts_in_float64_fall_back_to_the_dequantizing_path():
    fused, _ = _layer()
    module = qexperts.QuantizedExperts(fused, "int8", torch.float64)
    hidden = torch.randn(5, 64, dtype=torch.float64)
    index, weights = _routing(5, 16, 4, True, torch.float64)
    with torch.no_grad():
        assert torch.equal(module(hidden, index, weights), groupedexperts.dequant_grouped(module, hidden, index, weights))


def test_the_cpu_workspace_made_under_inference_mode_is_still_writable_outside_it():
    """A pass under torch.inference_mode (the bench, the engine) and then one under no_grad (a test, a
    caller of its own) share the thread's workspace: the second must not fail on an inference tensor."""
    fused, _ = _layer()
    module = qexperts.QuantizedExperts(fused, "fp8", torch.float32)  # the dequantizing path: the workspace
    hidden = torch.randn(6, 64)
    index, weights = _routing(6, 16, 4, True)
    groupedexperts.cpu_workspace().buffers.clear()
    with torch.inference_mode():
        first = module(hidden, index, weights).clone()
    with torch.no_grad():
        assert torch.equal(module(hidden, index, weights), first)

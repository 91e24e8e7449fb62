"""The CPU's weights-first matmuls (engine/weightsfirst.py): the unquantized experts and the LM head
equal the plain computation, the experts dispatch a bounded number of operations whatever the number
of experts hit, the CPU chooses them and CUDA does not, and the bench times what the engine runs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from clovercode.engine import expertpath, weightsfirst  # noqa: E402

OPS_PER_LAYER = 40  # issue 44


def _experts(dtype, experts: int = 16, hidden: int = 64, inner: int = 32, top_k: int = 4, seed: int = 0):
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeExperts

    torch.manual_seed(seed)
    config = Qwen3_5MoeTextConfig(hidden_size=hidden, moe_intermediate_size=inner, num_experts=experts,
                                  num_experts_per_tok=top_k)
    config._experts_implementation = weightsfirst.NAME
    weightsfirst.register()
    module = Qwen3_5MoeExperts(config)
    with torch.no_grad():
        module.gate_up_proj.normal_(0, 0.05)
        module.down_proj.normal_(0, 0.05)
    return module.to(dtype)


def _routing(tokens: int, experts: int, top_k: int, spread: bool, dtype):
    """Top-k picks hitting as many experts as they can (spread) or only the first top_k."""
    pool = experts if spread else top_k
    index = torch.stack([torch.randperm(pool)[:top_k] for _ in range(tokens)])
    return index, torch.softmax(torch.randn(tokens, top_k), -1).to(dtype)


def _reference(module, hidden, index, weights):
    """Each token through each of its experts, one at a time, in float64."""
    gate_up, down = module.gate_up_proj.double(), module.down_proj.double()
    out = torch.zeros(hidden.shape, dtype=torch.float64)
    for token in range(hidden.shape[0]):
        for slot in range(index.shape[1]):
            expert = int(index[token, slot])
            gate, up = (gate_up[expert] @ hidden[token].double()).chunk(2)
            out[token] += weights[token, slot].double() * (down[expert] @ (torch.nn.functional.silu(gate) * up))
    return out


@pytest.mark.parametrize("tokens,top_k,spread", [(32, 4, True), (32, 4, False), (1, 4, True), (3, 3, True)])
def test_the_weights_first_experts_equal_each_token_through_its_experts_in_float32(tokens, top_k, spread):
    module = _experts(torch.float32, top_k=top_k)
    hidden = torch.randn(tokens, 64)
    index, weights = _routing(tokens, 16, top_k, spread, torch.float32)
    assert weightsfirst.experts_fit(module, torch.float32)
    with torch.no_grad():
        got = module(hidden, index, weights)
    want = _reference(module, hidden, index, weights)
    assert got.dtype == torch.float32
    assert (got.double() - want).abs().max() <= 1e-5 * want.abs().max()


def test_float64_leaves_the_weights_first_path_for_the_batched_matmul_exactly():
    module = _experts(torch.float64)
    hidden = torch.randn(8, 64, dtype=torch.float64)
    index, weights = _routing(8, 16, 4, True, torch.float64)
    assert not weightsfirst.experts_fit(module, torch.float64)  # torch's grouped GEMM has no float64
    module.config._experts_implementation = "eager"  # transformers' per-expert loop: the float64 reference
    with torch.no_grad():
        want = module(hidden, index, weights)
        got = weightsfirst.experts_forward(module, hidden, index, weights)
    assert (got - want).abs().max() <= 1e-12 * want.abs().max()


def test_bfloat16_weights_first_experts_match_transformers_grouped_experts():
    from transformers.integrations.moe import grouped_mm_experts_forward

    module = _experts(torch.bfloat16)
    hidden = torch.randn(32, 64).to(torch.bfloat16)
    index, weights = _routing(32, 16, 4, True, torch.bfloat16)
    with torch.no_grad():
        got = weightsfirst.experts_forward(module, hidden, index, weights)
        want = grouped_mm_experts_forward(module, hidden, index, weights)
    assert (got.float() - want.float()).abs().max() <= 1e-2 * want.float().abs().max()


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def test_the_weights_first_experts_dispatch_the_same_few_operations_however_many_experts_are_hit():
    module = _experts(torch.float32, experts=64)
    hidden = torch.randn(32, 64)
    counts = []
    for spread in (True, False):  # ~all 64 experts hit, then only 4
        index, weights = _routing(32, 64, 4, spread, torch.float32)
        with torch.no_grad(), _Ops() as ops:
            module(hidden, index, weights)
        counts.append(len(ops.names))
        assert sum("grouped_mm" in name for name in ops.names) == 2
    assert counts[0] == counts[1] <= OPS_PER_LAYER


def test_the_cpu_chooses_the_weights_first_experts_and_cuda_keeps_transformers_grouped_gemm():
    grouped = frozenset({"grouped_mm"})
    assert expertpath.choose("cpu", None, "none", grouped).name == "weights_first_grouped_mm"
    assert expertpath.choose("cpu", None, "none", frozenset()).name == "batched_mm"  # a torch without it
    assert expertpath.choose("cuda", (9, 0), "none", grouped).name == "grouped_mm"
    assert expertpath.choose("cuda", (7, 5), "none", grouped).name == "batched_mm"
    assert all(p.name != "weights_first_grouped_mm" for cap in ((7, 5), (8, 0), (9, 0), (10, 0), (12, 0))
               for p in expertpath.candidates("cuda", cap, "none", False))
    assert expertpath.choose("cpu", None, "int8", grouped).name == "dequant_grouped"  # quantized: their own


def test_a_bf16_cpu_model_runs_the_weights_first_paths_with_the_same_logits():
    from tinymodels import VOCAB, tiny_hybrid

    model = tiny_hybrid(dtype=torch.bfloat16)
    model.set_experts_implementation("grouped_mm")
    ids = torch.arange(1, 9).unsqueeze(0) % VOCAB
    with torch.no_grad():
        want = model(ids).logits.float()
    assert expertpath.apply_unquantized(model, "cpu", None) == weightsfirst.NAME
    assert not weightsfirst.install_head(model, "cpu")  # 96 × 64: cache-resident, nothing to stream
    assert weightsfirst.install_head(model, "cpu", min_parameters=0)
    assert isinstance(model.lm_head, torch.nn.Linear) and model.get_output_embeddings() is model.lm_head
    with torch.no_grad():
        got = model(ids).logits
    assert got.is_contiguous() and got.dtype == torch.bfloat16
    assert (got.float() - want).abs().max() <= 2e-2 * want.abs().max()


def test_a_float32_cpu_model_keeps_transformers_grouped_gemm_and_its_linear_head():
    from tinymodels import tiny_hybrid

    model = tiny_hybrid(dtype=torch.float32)  # clover-tiny's CPU dtype: weights-first measured slower
    model.set_experts_implementation("grouped_mm")
    assert expertpath.apply_unquantized(model, "cpu", None) is None
    assert model.config._experts_implementation == "grouped_mm"
    assert not weightsfirst.install_head(model, "cpu", min_parameters=0)
    assert type(model.lm_head) is torch.nn.Linear


def test_models_the_weights_first_path_cannot_take_keep_their_experts_and_cuda_keeps_its_head():
    from tinymodels import tiny_hybrid

    model = tiny_hybrid(dtype=torch.float64)  # no float64 grouped GEMM: transformers' eager loop stays
    assert expertpath.apply_unquantized(model, "cpu", None) is None
    assert model.config._experts_implementation == "eager"
    assert not weightsfirst.install_head(model.to(torch.bfloat16), "cuda:0", min_parameters=0)
    assert type(model.lm_head) is torch.nn.Linear
    named = tiny_hybrid(dtype=torch.bfloat16)
    named.set_experts_implementation("batched_mm")  # asked for by name: kept
    assert expertpath.apply_unquantized(named, "cpu", None) is None
    assert named.config._experts_implementation == "batched_mm"
    odd = _experts(torch.bfloat16, hidden=60, inner=28)  # rows of 120 and 56 bytes: not 16-byte aligned
    assert not weightsfirst.experts_fit(odd, torch.bfloat16)


def test_the_weights_first_head_equals_the_linear_with_bias_and_any_leading_shape():
    head = torch.nn.Linear(64, 40, bias=True).to(torch.bfloat16)
    x = torch.randn(2, 5, 64).to(torch.bfloat16)
    with torch.no_grad():
        want = head(x).float()
        head.__class__ = weightsfirst.WeightsFirstLinear
        got = head(x)
        assert _first_matmul_operand(head, x) == (40, 64)  # it did go weights-first
        assert got.shape == (2, 5, 40) and got.is_contiguous()
        assert (got.float() - want).abs().max() <= 1e-2 * want.abs().max()
        assert torch.equal(head(x[0, 0]), torch.nn.functional.linear(x[0, 0], head.weight, head.bias))  # 1-D
        wide = torch.nn.Linear(64, 40).float()
        wide.__class__ = weightsfirst.WeightsFirstLinear  # float32: nn.Linear's form (faster there)
        assert _first_matmul_operand(wide, x.float()) == (10, 64)


def test_the_head_s_result_is_transposed_a_tile_at_a_time_to_the_same_bits(monkeypatch):
    columns = torch.randn(1000, 32).to(torch.bfloat16)  # a weights-first result: [vocabulary, rows]
    for tile in (7, 256, 1000, 4096):  # a last tile shorter than the others, one tile, one beyond the rows
        monkeypatch.setattr(weightsfirst, "TRANSPOSE_TILE", tile)
        got = weightsfirst.transposed(columns)
        assert got.is_contiguous() and torch.equal(got, columns.t().contiguous())


def test_the_roofline_bench_times_the_paths_the_engine_loader_sets():
    from clovercode.bench import roofline as bench

    model = bench.build(bench.clover_width_config(2, "tiny"), "cpu", torch.bfloat16)
    assert model.config._experts_implementation == weightsfirst.NAME
    assert type(model.lm_head) is torch.nn.Linear  # 512 × 64 at the tiny widths; Clover's is installed
    assert weightsfirst.install_head(model, "cpu", min_parameters=512 * 64)


def _first_matmul_operand(head, x):
    with torch.no_grad(), _Capture() as seen:
        head(x)
    return next(shape for name, shape in seen.calls if name in ("aten.mm.default", "aten.addmm.default"))


class _Capture(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        operands = [a for a in args if isinstance(a, torch.Tensor) and a.dim() == 2]
        self.calls.append((str(func), tuple(operands[-2].shape) if len(operands) >= 2 else ()))
        return func(*args, **(kwargs or {}))


def test_the_head_goes_weights_first_only_up_to_a_batch_1_block_of_rows():
    head = torch.nn.Linear(64, 40, bias=False).to(torch.bfloat16)
    head.__class__ = weightsfirst.WeightsFirstLinear
    block = torch.randn(1, weightsfirst.HEAD_ROWS, 64).to(torch.bfloat16)
    assert _first_matmul_operand(head, block) == (40, 64)  # the weights on the left
    wider = torch.randn(8, weightsfirst.HEAD_ROWS, 64).to(torch.bfloat16)  # batch 8: compute-bound, nn.Linear's form
    assert _first_matmul_operand(head, wider) == (8 * weightsfirst.HEAD_ROWS, 64)

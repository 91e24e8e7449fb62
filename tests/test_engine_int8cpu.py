"""The CPU's int8 linears (engine/int8cpu.py ``attach``): a linear torchao quantized to int8 runs torch's
int8 weight-only kernel on the stored bytes instead of torchao's bf16 copy of the whole weight per
forward, with the same result; what the kernel does not take still goes to torchao."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from clovercode.engine import int8cpu, quantize  # noqa: E402


class Names(TorchDispatchMode):
    """Each operation's name and how many elements its output has."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self.sizes: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.names.append(str(func))
        self.sizes.append((str(func), out.numel() if isinstance(out, torch.Tensor) else 0))
        return out


def _pair(dtype, bias: bool):
    torch.manual_seed(0)
    plain = torch.nn.Linear(96, 48, bias=bias).to(dtype)
    quantized = torch.nn.Linear(96, 48, bias=bias).to(dtype)
    quantized.load_state_dict(plain.state_dict())
    quantize.quantize_linear(quantized, "proj", "int8", "cpu")
    return plain, quantized


@pytest.mark.parametrize("dtype,bias", [(torch.bfloat16, False), (torch.float32, True)])
def test_an_int8_linear_on_the_cpu_multiplies_the_stored_bytes_and_matches_torchao(dtype, bias):
    plain, quantized = _pair(dtype, bias)
    weight = quantized.weight
    x = torch.randn(2, 5, 96, dtype=dtype)
    with torch.no_grad():
        assert int8cpu.linear_takes(x, weight)
        torchao_says = torch.nn.functional.linear(x, weight, quantized.bias)  # torchao's own path
        with Names() as seen:
            got = quantized(x)
        exact = x.float() @ (weight.qdata.float() * weight.scale.float()).t()
        exact = exact if not bias else exact + quantized.bias.float()
        assert got.shape == (2, 5, 48) and got.dtype == dtype
        tolerance = 1e-5 if dtype == torch.float32 else 1e-2
        assert (got.float() - exact).abs().max() <= tolerance * exact.abs().max()
        assert (got.float() - torchao_says.float()).abs().max() <= 2 * tolerance * exact.abs().max()
        assert (got.float() - plain(x).float()).abs().max() <= 0.05 * exact.abs().max()  # int8's own error
    assert any("_weight_int8pack_mm" in name for name in seen.names)
    # torchao's path converts the whole weight ([48, 96]) to floating point first; this one converts at
    # most the 48 scales
    assert not any("copy" in name and numel >= 48 * 96 for name, numel in seen.sizes), seen.sizes


def test_what_the_kernel_does_not_take_goes_to_torchao_and_many_rows_widen_the_weight_once():
    _, quantized = _pair(torch.float32, False)
    x = torch.randn(3, 96, dtype=torch.float64)  # the kernel takes 16- and 32-bit floats only
    assert not int8cpu.linear_takes(x, quantized.weight)
    assert not int8cpu.linear_takes(x.float(), torch.nn.Linear(96, 48).weight)  # not quantized
    assert not int8cpu.attach(torch.nn.Linear(96, 48))
    # many rows: the weight widened once into the reused buffer and one matmul; still never torchao's
    many = torch.randn(2, int8cpu.KERNEL_ROWS, 96)
    with torch.no_grad(), Names() as seen:
        got = quantized(many)
        want = torch.nn.functional.linear(many, quantized.weight)  # torchao's
    assert not any("_weight_int8pack_mm" in name for name in seen.names)
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()
    # a zero point that is not zero (not what symmetric int8 stores) is torchao's to apply, not the kernel's
    _, shifted = _pair(torch.float32, False)
    shifted.weight.zero_point.fill_(1)
    fresh = torch.nn.Linear(96, 48)
    fresh.weight = shifted.weight
    assert not int8cpu.attach(fresh)


def test_float16_never_sums_unscaled_int8_values_in_float16():
    """Widening sums the raw int8 values before the row scale: 127 × inputs over 4,096 columns passes
    float16's 65,504. float16 stays on the kernel, which scales in float32, at any number of rows."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(4096, 32, bias=False).to(torch.float16)
    with torch.no_grad():
        linear.weight.fill_(0.01)  # every stored value 127, its scale 0.01 / 127
    quantize.quantize_linear(linear, "proj", "int8", "cpu")
    x = torch.full((2 * int8cpu.KERNEL_ROWS, 4096), 1.0, dtype=torch.float16)
    with torch.no_grad():
        got = linear(x)
    assert torch.isfinite(got).all() and torch.allclose(got.float(), torch.full_like(got.float(), 40.96), rtol=1e-2)


@pytest.fixture
def amx():
    from clovercode.engine import amxlinear

    lib = amxlinear.library()
    if lib is None:
        pytest.skip("no AMX-BF16 or no C compiler here: the AMX linear is not built (torch's paths run)")
    return lib


@pytest.mark.parametrize("rows", [1, 8, 17, 32])
def test_the_amx_linear_equals_the_reference_at_a_block_s_rows(amx, rows):
    from clovercode.engine import amxlinear

    gen = torch.Generator().manual_seed(rows)
    qdata = torch.randint(-127, 128, (96, 128), dtype=torch.int8, generator=gen)
    scale = (torch.rand(96, generator=gen) * 0.01 + 1e-4).bfloat16()
    x = torch.randn(rows, 128, generator=gen).bfloat16()
    got = amxlinear.linear(amx, x, qdata, scale, 2)
    want = (x.double() @ qdata.double().t()) * scale.double()
    assert got.dtype == torch.bfloat16 and got.shape == (rows, 96)
    assert (got.double() - want).abs().max() <= 2 ** -8 * want.abs().max()  # bf16's rounding of the result


def test_the_amx_linear_refuses_what_it_does_not_take(amx):
    from clovercode.engine import amxlinear

    qdata, scale = torch.zeros(96, 128, dtype=torch.int8), torch.ones(96).bfloat16()
    for x, q, s in ((torch.zeros(33, 128).bfloat16(), qdata, scale),  # more rows than two tiles
                    (torch.zeros(4, 128), qdata, scale),  # float32 rows
                    (torch.zeros(4, 96).bfloat16(), qdata[:, :96].contiguous(), scale),  # 96 ok: 32 | 96
                    (torch.zeros(4, 128).bfloat16(), qdata[:80].contiguous(), scale[:80])):  # 80 rows: not 32 | 80
        if amxlinear.takes(x, q, s):
            assert x.shape[1] == 96  # the one shape above it does take
            continue
        with pytest.raises(ValueError):
            amxlinear.linear(amx, x, q, s, 2)


def test_a_block_s_rows_through_a_large_int8_linear_take_the_amx_path(amx, monkeypatch):
    from clovercode.engine import amxlinear

    _, quantized = _pair(torch.bfloat16, False)
    taken = []
    real = amxlinear.linear
    monkeypatch.setattr(amxlinear, "linear", lambda *a: taken.append(a[1].shape[0]) or real(*a))
    x = torch.randn(2, 16, 96, dtype=torch.bfloat16)
    with torch.no_grad():
        small = quantized(x)  # a 48 x 96 weight: under AMX_MIN_WEIGHT (packing costs more than it saves)
        assert taken == []
        monkeypatch.setattr(int8cpu, "AMX_MIN_WEIGHT", 1)
        got = quantized(x)  # 32 rows, but 48 output rows: not a multiple of 32, so still torch's paths
        assert taken == []
    weight = quantized.weight
    big = torch.nn.Linear(96, 64, bias=False).bfloat16()
    quantize.quantize_linear(big, "proj", "int8", "cpu")
    with torch.no_grad():
        out = big(x)
    assert taken == [32]
    want = x.double() @ (big.weight.qdata.double() * big.weight.scale.double().reshape(-1, 1)).t()
    assert (out.double() - want).abs().max() <= 2 ** -8 * want.abs().max()
    assert torch.equal(got, small) and weight is quantized.weight

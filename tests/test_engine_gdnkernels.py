"""The Gated DeltaNet kernels line (engine/gdnkernels.py): what transformers dispatches to, read from its
wrappers; the summary on CPU (fallback, with the reason) and on CUDA with and without the gpu extra; and
saying it changes nothing in the model. Exactness of the fla kernels against the fallback needs a GPU:
the GPU check measures it (docs/engine.md), it cannot be measured here."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rich.console import Console  # noqa: E402

from clovercode.engine import gdnkernels, loading  # noqa: E402

FAST = {"torch_chunk_gated_delta_rule": "fla", "torch_recurrent_gated_delta_rule": "fla",
        "causal_conv1d_fn": "causal_conv1d", "causal_conv1d_update": "causal_conv1d"}


def test_the_hybrid_models_functions_are_read_from_transformers_wrappers():
    from tinymodels import tiny_hybrid

    found = gdnkernels.kernels_in_use(tiny_hybrid(dtype=torch.float32))
    assert set(found) == set(gdnkernels.FUNCTIONS)  # transformers 5's four wrapped functions, all found
    # this machine has neither package: each is transformers' PyTorch reference, or for the delta rule
    # clovercode's CPU kernel once a load in this process installed it (engine/gdncpu.py)
    assert found["causal_conv1d_fn"] == found["causal_conv1d_update"] == "torch"
    assert {found["torch_chunk_gated_delta_rule"], found["torch_recurrent_gated_delta_rule"]} <= {"torch", "clovercode"}


def test_a_wrapper_holding_a_package_kernel_is_read_as_that_package():
    def kernel():  # stands in for fla's chunk_gated_delta_rule
        return None

    kernel.__module__ = "fla.ops.gated_delta_rule.chunk"

    def wrapped():  # transformers' wrapper: the chosen function in its closure
        return kernel()

    class Func(torch.nn.Module):  # and, with the kernels package, a module whose forward wraps that
        def forward(self):
            return wrapped()

    assert gdnkernels.dispatch(wrapped) == "fla" and gdnkernels.dispatch(Func()) == "fla"
    assert gdnkernels.dispatch(lambda: None) == "torch"


def test_the_summary_names_the_kernels_or_the_fallback_and_why():
    torch_only = dict.fromkeys(FAST, "torch")
    assert gdnkernels.summary("cuda", FAST) == "GDN: fla kernels (flash-linear-attention, causal-conv1d)"
    assert "PyTorch fallback — install the gpu extra" in gdnkernels.summary("cuda", torch_only)
    half = {**FAST, "causal_conv1d_fn": "torch", "causal_conv1d_update": "torch"}
    assert "causal-conv1d not installed" in gdnkernels.summary("cuda", half)
    cpu = gdnkernels.summary("cpu", FAST)  # installed, but the kernels take only CUDA inputs
    assert cpu.startswith("GDN: PyTorch fallback") and "run on CUDA, not cpu" in cpu
    assert gdnkernels.summary("cuda", None) is None  # no Gated DeltaNet layer: no line


@pytest.mark.parametrize("device,said", [("cpu", False), ("cuda", True)])
def test_the_load_summary_line_changes_nothing_in_the_model(monkeypatch, device, said):
    from tinymodels import VOCAB, tiny_hybrid

    from clovercode.engine import gdncpu

    modeling = __import__("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe", fromlist=["x"])
    for name in gdncpu.NAMES:  # the CPU load installs the delta rule's kernel there: restored after
        monkeypatch.setattr(modeling, name, getattr(modeling, name))
    model = tiny_hybrid()  # float64: the kernel leaves it to the fallbacks (float32 is its own test's)
    ids = torch.arange(1, 9).unsqueeze(0) % VOCAB
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        want = model(ids).logits
    monkeypatch.setattr(gdnkernels, "kernels_in_use", lambda m: dict(FAST))  # as if the gpu extra were there
    printed = []
    console = Console(file=open("/dev/null", "w"))
    monkeypatch.setattr(console, "print", lambda text, **kw: printed.append(text))
    loading._gdn_kernels(model, device, console)
    expected = gdnkernels.summary(device, FAST)
    assert model._clovercode_gdn == expected
    assert printed == ([f"note: {expected}"] if said else [])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, want)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())

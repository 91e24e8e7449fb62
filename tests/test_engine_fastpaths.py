"""A Clover-shaped model (its own model_type and auto_map, Qwen3.5-MoE's fields, 32-token blocks, a mask
token) loads with transformers' own classes, runs none of its code and gets every fast path; a model
whose code declares the cache contract gets them too; a refused fast path is a note that says why."""

import io
import json
import shutil

import pytest
import torch
from rich.console import Console

from clovercode.engine import archmap, attention
from clovercode.engine.batchdenoiser import SlotBatchDenoiser
from clovercode.engine.config import EngineConfig
from clovercode.engine.denoiser import CachedDenoiser
from clovercode.engine.engine import Engine
from clovercode.engine.graphs import StaticDenoiser, StaticState
from clovercode.engine.serialbatch import SerialBatchDenoiser
from clovercode.engine.sources import tiny_model_dir
from clovercode.ground.errors import ModelUnavailable

EVIL = "from pathlib import Path\nPath({marker!r}).write_text('ran')\n"


@pytest.fixture(autouse=True)
def modules_cache(tmp_path, monkeypatch):
    import sys

    from transformers import dynamic_module_utils

    monkeypatch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(tmp_path / "hf_modules"))
    yield
    for name in [n for n in sys.modules if n.startswith("transformers_modules")]:
        del sys.modules[name]


def clover_shaped(folder, marker, **extra):
    """The tiny hybrid Qwen3.5-MoE saved as Clover publishes itself: model_type "clover", its own
    architecture name and auto_map, block size 32, a mask token."""
    from tinymodels import tiny_hybrid

    model = tiny_hybrid(dtype=torch.float32)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny_model_dir() / name, folder / name)
    (folder / "modeling_clover.py").write_text(EVIL.format(marker=str(marker)))
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="clover", architectures=["CloverForCausalLM"], block_size=32, mask_token_id=95,
                  auto_map={"AutoConfig": "modeling_clover.CloverConfig",
                            "AutoModelForCausalLM": "modeling_clover.CloverForCausalLM"}, **extra)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_clover_shaped_config_maps_onto_qwen3_5_moe_and_every_fast_path_applies(tmp_path):
    marker = tmp_path / "ran"
    folder = clover_shaped(tmp_path / "clover", marker)
    out = io.StringIO()
    engine = Engine.open(str(folder), EngineConfig(dtype="float32"), Console(file=out, width=300))
    model = engine.model
    assert not marker.exists()
    assert type(model).__name__ == "Qwen3_5MoeForCausalLM" and type(model).__module__.startswith("transformers.")
    assert "whose architecture its config's fields are" in out.getvalue() and not engine.notes
    assert engine.info.block_size == 32 and engine.info.mask_token_id == 95
    assert model._clovercode_attention.route == "sdpa_gqa" and model.config._attn_implementation == attention.NAME
    assert CachedDenoiser(model).own_cache  # the index-written cache
    static = StaticDenoiser(model, graphs=False)
    assert isinstance(static.prefill([3, 4, 5, 6]), StaticState) and static.unsupported is None
    assert isinstance(engine.batch_denoiser(2), SlotBatchDenoiser)
    compiled = Engine(model, engine.tokenizer, engine.info, EngineConfig(compile="static"))
    batched = compiled.batch_denoiser(2)
    assert type(batched).__name__ == "GraphedBatch" and not batched.graphs  # no CUDA here: eager steps


def test_a_field_transformers_does_not_read_keeps_the_model_off_its_classes_and_says_which(tmp_path):
    folder = clover_shaped(tmp_path / "clover", tmp_path / "ran", diffusion_attention_bias="blockwise")
    with pytest.raises(ModelUnavailable) as err:
        Engine.open(str(folder), EngineConfig(dtype="float32"), Console(file=io.StringIO()))
    assert "diffusion_attention_bias" in str(err.value) and "trust_remote_code" in str(err.value)
    assert not (tmp_path / "ran").exists()


def test_the_mapping_rules():
    from tinymodels import tiny_hybrid

    fields = tiny_hybrid(dtype=torch.float32).config.to_dict()
    flat = {**fields, "model_type": "clover", "mask_token_id": 5, "bd_size": 32, "rope_theta": 1e6}
    assert archmap.map_config(flat).model_type == "qwen3_5_moe_text"
    nested = {"model_type": "clover", "text_config": {**fields, "model_type": "clover_text"}, "vision_config": {}}
    assert archmap.map_config(nested).model_type == "qwen3_5_moe"
    missing = {k: v for k, v in flat.items() if k != "linear_num_key_heads"}
    assert "no linear_num_key_heads" in archmap.map_config(missing).why
    odd = {**flat, "layer_types": ["full_attention", "sliding_attention"]}
    assert archmap.map_config(odd).model_type is None and "layer_types" in archmap.map_config(odd).why
    config = archmap.native_config(flat, "qwen3_5_moe_text")
    assert config.mask_token_id == 5 and config.bd_size == 32 and not hasattr(config, "auto_map")


CONTRACT_CODE = '''\
from transformers import Qwen3Config, Qwen3ForCausalLM


class KeptConfig(Qwen3Config):
    model_type = "keptqwen"


class KeptForCausalLM(Qwen3ForCausalLM):
    config_class = KeptConfig
    clovercode_cache = {contract!r}
'''


@pytest.mark.parametrize("contract", ["transformers-cache/1", None])
def test_remote_code_that_declares_the_cache_contract_gets_the_fast_paths_and_other_code_a_note(tmp_path, contract):
    from clovercode.trust.models import local_entry

    folder = tmp_path / "kept"
    folder.mkdir()
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "chat_template.jinja", "model.safetensors"):
        shutil.copy(tiny_model_dir() / name, folder / name)
    (folder / "kept.py").write_text(CONTRACT_CODE.format(contract=contract))
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="keptqwen", architectures=["KeptForCausalLM"],
                  auto_map={"AutoConfig": "kept.KeptConfig", "AutoModelForCausalLM": "kept.KeptForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config))
    out = io.StringIO()
    engine = Engine.open(str(folder), EngineConfig(trust_remote_code=(local_entry(folder),)),
                         Console(file=out, width=400))
    assert type(engine.model).__module__.startswith("transformers_modules.")
    denoiser = engine.batch_denoiser(2)
    if contract:
        assert CachedDenoiser(engine.model).own_cache and isinstance(denoiser, SlotBatchDenoiser)
        assert not engine.notes
    else:
        assert not CachedDenoiser(engine.model).own_cache
        assert "note: index-written cache skipped: it runs its own code (KeptForCausalLM)" in out.getvalue()
        assert "clovercode_cache" in out.getvalue()
        if isinstance(denoiser, SerialBatchDenoiser):
            assert any(note.startswith("slot batching skipped") for note in engine.notes)

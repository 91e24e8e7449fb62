"""Model specs, aliases and the one-message errors of loading; settings; lazy heavy imports."""

import json
import subprocess
import sys

import pytest
from rich.console import Console

from clovercode.ground.config import load_config
from clovercode.engine.config import EngineConfig, engine_config_from
from clovercode.engine.sources import CLOVER_REPO, cache_root, converted_dir, resolve, smollm2_gguf
from clovercode.ground.errors import ConfigError, ModelUnavailable
from conftest import cli_env


def test_missing_path_and_unknown_names_say_what_exists(tmp_path):
    with pytest.raises(ModelUnavailable, match="model path not found"):
        resolve(str(tmp_path / "nope"))
    with pytest.raises(ModelUnavailable) as err:
        resolve("definitely-not-a-model")
    assert "smollm2-demo" in str(err.value) and "clover" in str(err.value)
    with pytest.raises(ModelUnavailable) as err:  # `bench engine --model tiny`: the harness's test model
        resolve("tiny:context=512")
    assert "random-weight test model" in str(err.value) and "clover-tiny" in str(err.value)


def test_a_directory_needs_a_config_and_weights(tmp_path):
    with pytest.raises(ModelUnavailable, match="no config.json"):
        resolve(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelUnavailable, match="has no weights"):
        resolve(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"")
    source = resolve(str(tmp_path))
    assert source.kind == "dir" and not source.needs_trust


def test_remote_code_directories_need_trust_named_by_their_code_digest(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({"auto_map": {"AutoModelForCausalLM": "m.Model"}}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert resolve(str(tmp_path)).needs_trust
    from clovercode.engine.loading import load
    from clovercode.trust.models import code_digest

    with pytest.raises(ModelUnavailable) as err:
        load(resolve(str(tmp_path)), EngineConfig(), Console(file=open("/dev/null", "w")), tmp_path / "cache")
    assert f'trust_remote_code = ["{tmp_path.resolve()}#sha256:{code_digest(tmp_path)}"]' in str(err.value)


def test_repo_ids_come_only_from_the_local_cache_with_the_download_command(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailable) as err:
        resolve("clover")
    assert CLOVER_REPO in str(err.value)
    assert f"hf download {CLOVER_REPO}" in str(err.value)
    with pytest.raises(ModelUnavailable, match="hf download someone/model"):
        resolve("someone/model")


def test_cached_repo_with_remote_code_resolves_to_its_snapshot(monkeypatch, tmp_path):
    hub = tmp_path / "hub"
    folder = hub / "models--Diffuspace--Clover-35B-A3B-Preview"
    snapshot = folder / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text(json.dumps({"model_type": "clover"}))
    (snapshot / "model-00001-of-00002.safetensors").write_bytes(b"")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = resolve("clover")
    assert source.path == snapshot.resolve() or source.path == snapshot
    assert source.repo_id == CLOVER_REPO and source.revision is None  # "abc123" pins no commit
    assert not source.needs_trust  # trust follows the files (no auto_map here), not the name


def test_gguf_files_and_the_smollm2_alias(tmp_path):
    fake = tmp_path / "x.gguf"
    fake.write_bytes(b"GGUF")
    assert resolve(str(fake)).kind == "gguf"
    with pytest.raises(ModelUnavailable, match="not a .gguf"):
        other = tmp_path / "x.bin"
        other.write_bytes(b"")
        resolve(str(other))
    demo = resolve("smollm2-demo")
    assert demo.kind == "gguf" and demo.path == smollm2_gguf()
    assert converted_dir(demo.path, tmp_path).parent == tmp_path


def test_clover_tiny_alias_ships_with_the_package():
    source = resolve("clover-tiny")
    assert (source.path / "config.json").is_file()
    assert (source.path / "model.safetensors").stat().st_size < 10 * 2**20


def test_cache_root_follows_the_setting_then_xdg():
    assert str(cache_root({"HOME": "/h"}, "")) == "/h/.cache/clovercode/models"
    assert str(cache_root({"XDG_CACHE_HOME": "/x"}, "")) == "/x/clovercode/models"
    assert str(cache_root({"XDG_CACHE_HOME": "/x"}, "/elsewhere")) == "/elsewhere"


def test_engine_settings_layer_like_every_setting(tmp_path):
    (tmp_path / "clovercode.toml").write_text("[engine]\nblock_size = 16\nthreshold = 0.8\nstrategy = \"topk\"\n")
    cfg = load_config(tmp_path, {"HOME": str(tmp_path), "CLOVERCODE_ENGINE_DEVICE": "cpu"}, {})
    engine = engine_config_from(cfg)
    assert (engine.block_size, engine.threshold, engine.strategy, engine.device) == (16, 0.8, "topk", "cpu")
    assert engine.mask_token_id is None


def test_a_project_file_cannot_turn_on_remote_code(tmp_path):
    (tmp_path / "clovercode.toml").write_text(f'[engine]\ntrust_remote_code = ["a/b@{"0" * 40}"]\n')
    cfg = load_config(tmp_path, {"HOME": str(tmp_path)}, {}, trust_project=True)  # ignored even when trusted
    assert cfg["engine.trust_remote_code"] == () and "ignored engine.trust_remote_code" in cfg.declared.notes[0]


def test_bad_engine_values_are_config_errors(tmp_path):
    cfg = load_config(tmp_path, {"HOME": str(tmp_path), "CLOVERCODE_ENGINE_THRESHOLD": "1.5"}, {})
    with pytest.raises(ConfigError, match="threshold"):
        engine_config_from(cfg)


def test_cli_startup_does_not_import_torch():
    code = ("import sys, clovercode.front.cli, clovercode.backends.embedded, clovercode.engine.engine, "
            "clovercode.bench.engine; print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=True)
    assert out.stdout.strip() == "False False"


def test_not_enough_memory_is_one_message_with_the_sizes(monkeypatch, tmp_path):
    from clovercode.engine import loading

    monkeypatch.setattr(loading, "free_memory", lambda device: 1_000_000)
    with pytest.raises(ModelUnavailable) as err:
        loading.load(resolve("clover-tiny"), EngineConfig(), Console(file=open("/dev/null", "w")), tmp_path)
    text = str(err.value)
    assert "not enough memory to load clover-tiny: it needs about 14.1 MiB in float32" in text and "engine.dtype" in text
    assert loading.parameter_count(resolve("clover-tiny").path) == 3_689_216


def test_a_device_that_is_not_there_is_one_message():
    import torch

    from clovercode.engine.loading import pick_device

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ModelUnavailable, match="no CUDA device"):
        pick_device("cuda")
    assert pick_device("auto") in ("cpu", "mps")


def test_damaged_weights_are_one_message_not_a_crash(tmp_path):
    """A file named *.safetensors whose first bytes are not a header: the size check must not try to
    read an absurd header length (MemoryError), and the weights load must say what is wrong."""
    import shutil

    from clovercode.engine import loading

    folder = tmp_path / "damaged"
    folder.mkdir()
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(resolve("clover-tiny").path / name, folder / name)
    (folder / "model.safetensors").write_bytes(b"garbage\n" + b"x" * 64)
    assert loading.parameter_count(folder) is None
    (folder / "model.safetensors").write_bytes((40).to_bytes(8, "little") + b'{"w": 1}' + b" " * 32)
    assert loading.parameter_count(folder) is None
    with pytest.raises(ModelUnavailable, match="weights file is damaged .model.safetensors."):
        loading.load(resolve(str(folder)), EngineConfig(), Console(file=open("/dev/null", "w")), tmp_path / "cache")

"""Trust: model files and remote code (docs/security.md, issue 24).

The attacks: a model directory whose ``config.json`` ``auto_map`` points at its own Python (run at
load time with ``engine.trust_remote_code = true``), and hostile or broken model files (pickle
weights, a Jinja sandbox escape in the chat template, a truncated safetensors file, a config that is
not JSON) that must end as a model error (exit 5) with the reason, never an internal error."""

from __future__ import annotations

import io
import json
import pickle
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from clovercode.engine.config import EngineConfig
from clovercode.engine.engine import Engine
from clovercode.engine.sources import resolve, tiny_model_dir
from clovercode.ground.errors import ConfigError, ExitCode, ModelUnavailable
from clovercode.trust import models as trust_models
from conftest import cli_env, make_git_repo, run_cli

TINY_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "chat_template.jinja", "model.safetensors")

EVIL = '''\
from pathlib import Path

Path({marker!r}).write_text("the model's own code ran")

from transformers import Qwen3Config, Qwen3ForCausalLM


class EvilConfig(Qwen3Config):
    model_type = {model_type!r}


class EvilForCausalLM(Qwen3ForCausalLM):
    config_class = EvilConfig
'''


def model_with_code(folder: Path, marker: Path, model_type: str = "evilqwen") -> Path:
    """clover-tiny's weights and tokenizer, plus an ``auto_map`` to ``evil.py``, which writes
    ``marker`` when it is imported. With a ``model_type`` transformers knows ("qwen3") the config
    maps onto transformers' own classes; with one it does not, only the model's code can load it."""
    folder.mkdir(parents=True)
    for name in TINY_FILES:
        shutil.copy(tiny_model_dir() / name, folder / name)
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker), model_type=model_type))
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilForCausalLM"}
    config["model_type"] = model_type
    if model_type != "qwen3":
        config["architectures"] = ["EvilForCausalLM"]
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(autouse=True)
def modules_cache(tmp_path, monkeypatch):
    """transformers copies remote code into a modules cache and imports it from there: keep it in tmp,
    and never let an earlier test's import of ``evil`` satisfy a later one."""
    import sys

    from transformers import dynamic_module_utils

    monkeypatch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(tmp_path / "hf_modules"))
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "hf_modules"))
    yield
    for name in [n for n in sys.modules if n.startswith("transformers_modules")]:
        del sys.modules[name]


def quiet() -> Console:
    return Console(file=io.StringIO(), width=300)


# --- remote code is trusted per model ------------------------------------------------------------

def test_another_models_trust_does_not_run_this_models_code(tmp_path):
    """The attack: `engine.trust_remote_code = true`, set for Clover, made any model's code run.
    Now trust names a model, and a model that is not named is refused with the line to add."""
    marker = tmp_path / "ran"
    folder = model_with_code(tmp_path / "repo" / "m", marker)
    other = f"{tmp_path / 'elsewhere'}#sha256:{'0' * 64}"
    with pytest.raises(ModelUnavailable) as err:
        Engine.open(str(folder), EngineConfig(trust_remote_code=(other, "Diffuspace/Clover-35B-A3B-Preview@" + "a" * 40)),
                    quiet())
    assert not marker.exists()
    entry = trust_models.local_entry(folder)
    assert f'trust_remote_code = ["{entry}"]' in str(err.value) and "[engine]" in str(err.value)


def test_the_named_model_runs_its_code_and_a_changed_file_withdraws_the_trust(tmp_path):
    marker = tmp_path / "ran"
    folder = model_with_code(tmp_path / "m", marker)
    entry = trust_models.local_entry(folder)
    out = io.StringIO()
    engine = Engine.open(str(folder), EngineConfig(trust_remote_code=(entry,)), Console(file=out, width=300))
    assert marker.exists() and type(engine.model).__name__ == "EvilForCausalLM"
    assert "warning" in out.getvalue() and "own Python code" in out.getvalue()
    marker.unlink()
    (folder / "evil.py").write_text((folder / "evil.py").read_text() + "\nimport os\n")  # the code changed
    with pytest.raises(ModelUnavailable, match="not trusted"):
        Engine.open(str(folder), EngineConfig(trust_remote_code=(entry,)), quiet())
    assert not marker.exists()


def test_a_helper_module_and_the_tokenizer_config_are_part_of_the_digest(tmp_path):
    folder = model_with_code(tmp_path / "m", tmp_path / "ran")
    before = trust_models.code_digest(folder)
    (folder / "sub").mkdir()
    (folder / "sub" / "helper.py").write_text("x = 1\n")
    after_helper = trust_models.code_digest(folder)
    tokenizer = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer["auto_map"] = {"AutoTokenizer": ["evil.Tok", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    after_tokenizer = trust_models.code_digest(folder)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "more.py").write_text("y = 2\n")
    (folder / "linked").symlink_to(outside)
    (folder / "loop").symlink_to(folder)  # a cycle is walked once, not forever
    after_link = trust_models.code_digest(folder)
    (outside / "more.py").write_text("y = 3\n")
    assert len({before, after_helper, after_tokenizer, after_link, trust_models.code_digest(folder)}) == 5


def test_a_hub_model_is_named_by_its_pinned_revision(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    commit, other = "c0ffee" + "0" * 34, "b" * 40
    snapshot = hub / "models--someone--coder" / "snapshots" / commit
    model_with_code(snapshot, tmp_path / "ran")
    (hub / "models--someone--coder" / "refs").mkdir()
    (hub / "models--someone--coder" / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = resolve("someone/coder")
    assert source.revision == commit
    assert trust_models.required_entry(source.path, source.repo_id, source.revision) == f"someone/coder@{commit}"
    assert trust_models.is_trusted((f"Someone/Coder@{commit}",), source.path, source.repo_id, source.revision)
    assert not trust_models.is_trusted((f"someone/coder@{other}",), source.path, source.repo_id, source.revision)
    assert not trust_models.is_trusted(("someone/other@" + commit,), source.path, source.repo_id, source.revision)
    with pytest.raises(ModelUnavailable) as err:
        Engine.open("someone/coder", EngineConfig(trust_remote_code=(f"someone/coder@{other}",)), quiet())
    assert f'"someone/coder@{commit}"' in str(err.value) and not (tmp_path / "ran").exists()


@pytest.mark.parametrize("value", [True, "true", "1", "yes", ["true"], "someone/coder", "someone/coder@main",
                                   "./relative#sha256:" + "0" * 64, "/abs/path", "/abs/path#sha256:abc"])
def test_the_old_boolean_and_unpinned_names_are_config_errors(value):
    with pytest.raises(ConfigError) as err:
        trust_models.parse_entries(value, "config.toml: 'engine.trust_remote_code'")
    assert "engine.trust_remote_code" in str(err.value)
    if value in (True, "true", "1", "yes", ["true"]):
        assert "names the models" in str(err.value) and "@" in str(err.value)


def test_user_config_true_is_refused_with_the_new_form(tmp_path):
    from clovercode.ground.config import load_config

    config_dir = tmp_path / "home" / ".config" / "clovercode"
    config_dir.mkdir(parents=True)
    (config_dir / "config.toml").write_text("[engine]\ntrust_remote_code = true\n")
    with pytest.raises(ConfigError, match="names the models"):
        load_config(None, {"HOME": str(tmp_path / "home")}, {})
    (config_dir / "config.toml").write_text(f'[engine]\ntrust_remote_code = ["someone/coder@{"a" * 40}"]\n')
    assert load_config(None, {"HOME": str(tmp_path / "home")}, {})["engine.trust_remote_code"] == (
        f"someone/coder@{'a' * 40}",)


def test_a_project_file_cannot_name_a_model_either(tmp_path):
    from clovercode.ground.config import load_config

    (tmp_path / "clovercode.toml").write_text(f'[engine]\ntrust_remote_code = ["someone/coder@{"a" * 40}"]\n')
    for trusted in (False, True):  # ignored with a note, even in a trusted project (trust/project.py)
        cfg = load_config(tmp_path, {"HOME": str(tmp_path / "home")}, {}, trust_project=trusted)
        assert cfg["engine.trust_remote_code"] == ()
        assert any("ignored engine.trust_remote_code" in note for note in cfg.declared.notes)


def test_the_cli_with_the_old_true_runs_no_model_code(tmp_path):
    """Through the real CLI: the user's old `trust_remote_code = true` and a repository's `./m`."""
    marker = tmp_path / "ran"
    project = tmp_path / "project"
    model_with_code(project / "m", marker)
    home = tmp_path / "home"
    (home / ".config" / "clovercode").mkdir(parents=True)
    (home / ".config" / "clovercode" / "config.toml").write_text("[engine]\ntrust_remote_code = true\n")
    env = cli_env(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), HF_MODULES_CACHE=str(tmp_path / "mods"),
                  CLOVERCODE_ENGINE_DEVICE="cpu")
    proc = run_cli("exec", "--sandbox", "none", "--model", "./m", "hello", cwd=project, env=env, timeout=300)
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    assert "names the models" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists()
    (home / ".config" / "clovercode" / "config.toml").write_text(
        f'[engine]\ntrust_remote_code = ["someone/coder@{"a" * 40}"]\n')
    proc = run_cli("exec", "--sandbox", "none", "--model", "./m", "hello", cwd=project, env=env, timeout=300)
    assert proc.returncode == ExitCode.MODEL_UNAVAILABLE, proc.stderr
    assert f'trust_remote_code = ["{trust_models.local_entry(project / "m")}"]' in proc.stderr
    assert not marker.exists()


# --- transformers' own classes where the config maps onto one ------------------------------------

def test_a_known_architecture_loads_with_transformers_classes_and_runs_no_code(tmp_path):
    """A Qwen3 model (clover-tiny) that also ships an auto_map: nothing is trusted, yet it loads,
    with transformers' own Qwen3 classes; its code never runs."""
    marker = tmp_path / "ran"
    folder = model_with_code(tmp_path / "m", marker, model_type="qwen3")
    assert resolve(str(folder)).needs_trust
    out = io.StringIO()
    engine = Engine.open(str(folder), EngineConfig(), Console(file=out, width=300))
    assert not marker.exists()
    assert type(engine.model).__name__ == "Qwen3ForCausalLM" and type(engine.model).__module__.startswith("transformers.models")
    assert "transformers' own" in out.getvalue() and "not run" in out.getvalue()
    assert engine.info.mask_token_id == 3 and engine.info.block_size == 16  # the diffusion metadata is config-level


def test_a_hybrid_qwen3_5_moe_like_clover_needs_no_remote_code(tmp_path):
    """Clover's architecture (Qwen3.5-MoE text, Gated DeltaNet + attention): a config that names it
    loads with transformers' classes even though the directory ships code."""
    import torch

    from tinymodels import tiny_hybrid

    marker = tmp_path / "ran"
    folder = tmp_path / "clover-like"
    model = tiny_hybrid(dtype=torch.float32)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny_model_dir() / name, folder / name)
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker), model_type="qwen3_5_moe_text"))
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "evil.EvilForCausalLM"}
    (folder / "config.json").write_text(json.dumps(config))
    engine = Engine.open(str(folder), EngineConfig(dtype="float32"), quiet())
    assert not marker.exists() and type(engine.model).__name__ == "Qwen3_5MoeForCausalLM"
    assert engine.info.mask_token_id == model.config.mask_token_id


def test_weights_that_do_not_fit_the_known_class_need_the_models_code(tmp_path):
    """A config that claims a known architecture but whose weights do not fit it: loading it with the
    stock class would silently drop or invent weights, so it is refused (the model's own code decides)."""
    from safetensors.torch import load_file, save_file

    marker = tmp_path / "ran"
    folder = model_with_code(tmp_path / "m", marker, model_type="qwen3")
    tensors = load_file(folder / "model.safetensors")
    tensors["model.extra_gate.weight"] = tensors["model.norm.weight"].clone()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelUnavailable) as err:
        Engine.open(str(folder), EngineConfig(), quiet())
    assert "model.extra_gate.weight" in str(err.value)
    assert f'trust_remote_code = ["{trust_models.local_entry(folder)}"]' in str(err.value)
    assert not marker.exists()


# --- hostile or broken model files are model errors (exit 5) -------------------------------------

class _Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (Path(self.marker).write_text, ("pickle ran",))


def _tiny_copy(folder: Path, skip: tuple[str, ...] = ()) -> Path:
    folder.mkdir(parents=True)
    for name in TINY_FILES:
        if name not in skip:
            shutil.copy(tiny_model_dir() / name, folder / name)
    return folder


def pickle_weights(folder: Path, marker: Path) -> str:
    _tiny_copy(folder, skip=("model.safetensors",))
    with (folder / "pytorch_model.bin").open("wb") as handle:
        pickle.dump({"model.embed_tokens.weight": _Payload(str(marker))}, handle)
    return "pickle"


def jinja_escape(folder: Path, marker: Path) -> str:
    _tiny_copy(folder)
    (folder / "chat_template.jinja").write_text(
        "{{ ''.__class__.__mro__[1].__subclasses__() }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    return "chat template"


def truncated_safetensors(folder: Path, marker: Path) -> str:
    _tiny_copy(folder)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 3])
    return "model.safetensors"


def config_not_json(folder: Path, marker: Path) -> str:
    _tiny_copy(folder)
    (folder / "config.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00 not json at all")
    return "config.json"


def config_not_an_object(folder: Path, marker: Path) -> str:
    _tiny_copy(folder)
    (folder / "config.json").write_text("[1, 2, 3]")
    return "config.json"


BAD_MODELS = [pickle_weights, jinja_escape, truncated_safetensors, config_not_json, config_not_an_object]


@pytest.mark.parametrize("make", BAD_MODELS, ids=lambda f: f.__name__)
def test_a_bad_model_is_a_model_error_with_the_reason(tmp_path, make):
    marker = tmp_path / "ran"
    reason = make(tmp_path / "bad-model-dir", marker)
    with pytest.raises(ModelUnavailable) as err:
        Engine.open(str(tmp_path / "bad-model-dir"), EngineConfig(device="cpu"), quiet())
    assert reason in str(err.value)
    assert not marker.exists()


@pytest.mark.parametrize("make", [pickle_weights, jinja_escape, truncated_safetensors, config_not_json],
                         ids=lambda f: f.__name__)
def test_exec_with_a_bad_model_exits_5_with_the_reason(tmp_path, make):
    marker = tmp_path / "ran"
    project = tmp_path / "project"
    project.mkdir()
    reason = make(project / "bad-model-dir", marker)
    proc = run_cli("exec", "--sandbox", "none", "--model", "./bad-model-dir", "hello", cwd=project,
                   env=cli_env(CLOVERCODE_ENGINE_DEVICE="cpu"), timeout=300)
    assert proc.returncode == ExitCode.MODEL_UNAVAILABLE, proc.stderr
    assert reason in proc.stderr and "Traceback" not in proc.stderr and "internal error" not in proc.stderr.lower()
    assert not marker.exists()


def test_fix_with_pickle_weights_exits_5(tmp_path, calc_repo):
    marker = tmp_path / "ran"
    pickle_weights(tmp_path / "bad-model-dir", marker)
    proc = run_cli("fix", "--sandbox", "none", "--model", str(tmp_path / "bad-model-dir"), "mean() is wrong", cwd=calc_repo,
                   env=cli_env(CLOVERCODE_ENGINE_DEVICE="cpu"), timeout=300)
    assert proc.returncode == ExitCode.MODEL_UNAVAILABLE, proc.stderr
    assert "pickle" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists()


def test_the_model_trust_rules_are_ground_floor():
    import ast

    import clovercode.trust.models as module

    tree = ast.parse(Path(module.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert {m for m in imported if m.startswith("clovercode")} == {"clovercode.ground.errors"}
    assert not {m for m in imported if m.split(".")[0] in ("torch", "transformers", "huggingface_hub")}


def test_a_template_that_escapes_only_for_real_messages_is_a_model_error_mid_run(tmp_path):
    """The load-time probe renders a plain conversation; a template that attacks only when a tool
    result arrives must still end as a model error (exit 5), not an internal one."""
    from clovercode.backends.base import GenerationParams, ModelError
    from clovercode.backends.embedded import EmbeddedBackend

    folder = _tiny_copy(tmp_path / "m")
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}{% if m['role'] == 'assistant' %}{{ cycler.__init__.__globals__ }}{% endif %}"
        "{{ m['content'] }}{% endfor %}")
    backend = EmbeddedBackend(Engine.open(str(folder), EngineConfig(device="cpu"), quiet()))
    params = GenerationParams(max_new_tokens=4, thinking=False)
    from clovercode.ground.messages import Message

    with pytest.raises(ModelError) as err:
        list(backend.generate([Message("user", "hi"), Message("assistant", "x"), Message("user", "go")], [], params))
    assert err.value.exit_code == ExitCode.MODEL_UNAVAILABLE and "chat template" in str(err.value)

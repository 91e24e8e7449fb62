"""Host paths hidden beyond ``sandbox/secrets.toml``: clovercode's own state, cache and config (other
projects' trajectories, REPL history, MCP server logs, tag caches, a saved API key), wherever the
environment and settings put them, and the user's own ``sandbox_hide`` list.

Computed from the same environment and settings that decide where clovercode writes these files, so
moving them (XDG_STATE_HOME, CLOVERCODE_HOME, trajectory_dir …) moves what is hidden with them."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Mapping

from clovercode.ground.config import Config, state_dir, user_config_path
from clovercode.ground.errors import ConfigError
from clovercode.sandboxing.policy import Policy, load_policy


def cache_dir(env: Mapping[str, str]) -> Path:
    """clovercode's cache directory: $XDG_CACHE_HOME/clovercode (tag caches, converted models)."""
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")) / ".cache")
    return Path(base).expanduser() / "clovercode"


def own_paths(cfg: Config, env: Mapping[str, str]) -> tuple[str, ...]:
    """Where clovercode keeps what one project's commands must not read of another's."""
    config = user_config_path(env)
    paths = [state_dir(env), cache_dir(env), config if env.get("CLOVERCODE_CONFIG") else config.parent]
    paths += [Path(cfg[key]).expanduser() for key in ("trajectory_dir", "history_file", "context.cache_dir") if cfg[key]]
    return tuple(dict.fromkeys(os.path.abspath(p) for p in paths))


def user_hidden(cfg: Config) -> tuple[str, ...]:
    """The ``sandbox_hide`` setting, checked: absolute paths or "~/" paths, globs allowed."""
    entries = tuple(cfg["sandbox_hide"])
    for entry in entries:
        if not (entry.startswith("/") or entry.startswith("~/")):
            raise ConfigError(f"sandbox_hide: {entry!r} is neither absolute nor under ~/",
                              hint='Write host paths as "/abs/path" or "~/path" (glob characters are allowed).')
    return entries


def user_shown(cfg: Config) -> tuple[str, ...]:
    """The ``sandbox_show`` setting, checked: "~/" paths (what of the hidden home comes back)."""
    entries = tuple(cfg["sandbox_show"])
    for entry in entries:
        if not (entry == "~" or entry.startswith("~/")) or "/../" in entry + "/":
            raise ConfigError(f"sandbox_show: {entry!r} is not a path under ~/",
                              hint='The home is hidden from sandboxed commands; write what comes back as "~/path" '
                                   "(glob characters are allowed). Paths outside the home are visible anyway.")
    return entries


def hidden_paths(cfg: Config, env: Mapping[str, str], project: Path | None = None) -> tuple[str, ...]:
    """Everything hidden on top of the shipped list, as patterns ``expand_patterns`` takes. An own
    directory that holds ``project`` is left out: hiding it would hide the project itself."""
    own = own_paths(cfg, env)
    if project is not None:
        root = os.path.realpath(project)
        own = tuple(p for p in own if not _holds(os.path.realpath(p), root))
    return (*own, *user_hidden(cfg))


def policy_for(name: str, cfg: Config, env: Mapping[str, str], project: Path) -> Policy:
    """The sandbox policy ``name`` with these paths hidden too: what commands in ``project`` run under."""
    policy = load_policy(name)
    return dataclasses.replace(policy, hidden=(*policy.hidden, *hidden_paths(cfg, env, project)),
                               home_visible=(*policy.home_visible, *user_shown(cfg)))


def _holds(directory: str, path: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")

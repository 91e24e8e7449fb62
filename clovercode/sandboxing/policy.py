"""Sandbox policy as data: a profile from ``sandbox/<name>.toml`` joined with the shared lists
(protected project paths, hidden host secrets, masked directories, the environment allowlist)."""

from __future__ import annotations

import os
import pwd
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from clovercode.ground.errors import SandboxUnavailable
from clovercode.ground.resources import data_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROFILES = ("read-only", "workspace-write", "workspace-write-network")


@dataclass(frozen=True)
class Policy:
    name: str
    description: str
    project_writable: bool
    network: bool
    expose: tuple[str, ...] = ()  # host paths re-bound inside masked directories
    read_only: tuple[str, ...] = ()  # project-relative paths commands may not write
    # CI definitions and hook managers (relative to the work tree's top), read-only like read_only, and
    # with them the tree's core.hooksPath directory; empty for `fix --allow-ci-changes`
    runs_outside: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()  # host path patterns ("~" = home) commands may not read
    home_visible: tuple[str, ...] = ()  # "~/" patterns bound back, read-only, into the hidden home
    home_scrubbed: tuple[str, ...] = ()  # git config files bound back as copies rebuilt from an allowlist
    masked: tuple[str, ...] = ()  # host directories replaced by an empty tmpfs
    env_allow: tuple[str, ...] = ()
    env_deny: tuple[str, ...] = ()
    env_set: tuple[tuple[str, str], ...] = ()


def load_policy(name: str, directory: Path | None = None) -> Policy:
    """The profile ``name`` with the shared lists; a SandboxUnavailable names a broken file."""
    if name not in PROFILES:
        raise SandboxUnavailable(f"unknown sandbox policy '{name}'", hint=f"Choose one of: {', '.join(PROFILES)}.")
    where = directory or data_dir("sandbox")
    profile = _load(where / f"{name}.toml")
    protected, secrets, environment, home = (_load(where / f) for f in ("protected.toml", "secrets.toml",
                                                                        "environment.toml", "home.toml"))
    env_set = environment.get("set", {})
    if not isinstance(env_set, dict) or not all(isinstance(v, str) for v in env_set.values()):
        raise _broken(where / "environment.toml", "'set' must be a table of strings")
    return Policy(
        name=name,
        description=_text(profile, "description", where / f"{name}.toml"),
        project_writable=_flag(profile, "project_writable", where / f"{name}.toml"),
        network=_flag(profile, "network", where / f"{name}.toml"),
        expose=_strings(profile, "expose", where / f"{name}.toml"),
        read_only=_strings(protected, "read_only", where / "protected.toml"),
        runs_outside=(*_strings(protected, "runs_outside", where / "protected.toml"),
                      *_reasons(protected, "runs_commands", where / "protected.toml")),
        hidden=_strings(secrets, "hidden", where / "secrets.toml"),
        masked=_strings(secrets, "masked", where / "secrets.toml"),
        home_visible=_strings(home, "visible", where / "home.toml"),
        home_scrubbed=_strings(home, "scrubbed", where / "home.toml"),
        env_allow=_strings(environment, "allow", where / "environment.toml"),
        env_deny=_strings(environment, "deny", where / "environment.toml"),
        env_set=tuple(sorted(env_set.items())),
    )


def load_tool_refused(directory: Path | None = None) -> tuple[str, ...]:
    """Project paths the file tools must not write (protected.toml ``tool_refused``)."""
    path = (directory or data_dir("sandbox")) / "protected.toml"
    return _strings(_load(path), "tool_refused", path)


def load_runs_outside(directory: Path | None = None) -> tuple[str, ...]:
    """CI definitions, git hook managers and files that make other tools run commands (protected.toml
    ``runs_outside`` and ``runs_commands``): what ``fix`` does not commit, sandboxed commands cannot
    write and the file tools do not write unless the user allows CI changes."""
    path = (directory or data_dir("sandbox")) / "protected.toml"
    table = _load(path)
    return (*_strings(table, "runs_outside", path), *_reasons(table, "runs_commands", path))


def load_runs_commands(directory: Path | None = None) -> dict[str, str]:
    """protected.toml ``runs_commands``: path -> which tool runs what from it."""
    path = (directory or data_dir("sandbox")) / "protected.toml"
    return _reasons(_load(path), "runs_commands", path)


def load_hidden(directory: Path | None = None) -> tuple[str, ...]:
    path = (directory or data_dir("sandbox")) / "secrets.toml"
    return _strings(_load(path), "hidden", path)


def home_dirs(env: Mapping[str, str]) -> tuple[str, ...]:
    """$HOME and the passwd home of this user (CI often runs with one differing from the other)."""
    homes = []
    if env.get("HOME"):
        homes.append(os.path.abspath(env["HOME"]))
    try:
        homes.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:  # pragma: no cover - a uid without a passwd entry
        pass
    return tuple(dict.fromkeys(h for h in homes if h and h != "/"))


def expand_patterns(patterns: tuple[str, ...], homes: tuple[str, ...]) -> tuple[str, ...]:
    """Absolute patterns: each "~/x" once per home directory; others as written."""
    out: list[str] = []
    for pattern in patterns:
        if pattern == "~" or pattern.startswith("~/"):
            out.extend(home + pattern[1:] for home in homes)
        else:
            out.append(pattern)
    return tuple(dict.fromkeys(out))


def _load(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _broken(path, "the file is missing") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise _broken(path, str(exc)) from None


def _broken(path: Path, why: str) -> SandboxUnavailable:
    return SandboxUnavailable(f"sandbox policy file {path} is invalid: {why}",
                              hint="Reinstall clovercode, or fix the file if you edited it.")


def _text(table: dict[str, Any], key: str, path: Path) -> str:
    value = table.get(key, "")
    if not isinstance(value, str):
        raise _broken(path, f"'{key}' must be a string")
    return value


def _flag(table: dict[str, Any], key: str, path: Path) -> bool:
    value = table.get(key)
    if not isinstance(value, bool):
        raise _broken(path, f"'{key}' must be true or false")
    return value


def _reasons(table: dict[str, Any], key: str, path: Path) -> dict[str, str]:
    value = table.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(k, str) and k and isinstance(v, str) and v.strip()
                                              for k, v in value.items()):
        raise _broken(path, f"'{key}' must be a table of paths, each with the reason it is protected")
    return dict(value)


def _strings(table: dict[str, Any], key: str, path: Path) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _broken(path, f"'{key}' must be a list of non-empty strings")
    return tuple(value)

"""Credential stores the environment moves: ``KUBECONFIG=/srv/kube.yaml``, ``GH_CONFIG_DIR``,
``GNUPGHOME``, ``GOOGLE_APPLICATION_CREDENTIALS`` … name where a tool keeps its login, so the store
is wherever the variable points, not where ``sandbox/secrets.toml`` expects it. The rule: a variable
that names a tool's config or credential location is a store. Which variables that is comes from
secrets.toml (``env_stores``, ``env_store_patterns``, ``env_stores_below``); the sandbox hides these
paths and the file tools refuse them, like the shipped list."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from clovercode.ground.resources import data_dir


@dataclass(frozen=True)
class StoreVariables:
    names: tuple[str, ...] = ()  # variables that name a store
    patterns: tuple[str, ...] = ()  # fnmatch patterns on the upper-cased name
    below: tuple[tuple[str, tuple[str, ...]], ...] = ()  # variable naming a directory -> its store files

    def files_below(self, name: str) -> tuple[str, ...] | None:
        return next((files for var, files in self.below if var == name), None)


def load_store_variables(directory: Path | None = None) -> StoreVariables:
    """secrets.toml's store variables; a SandboxUnavailable names a broken file."""
    from clovercode.sandboxing.policy import _broken, _load, _strings

    path = (directory or data_dir("sandbox")) / "secrets.toml"
    table = _load(path)
    below = table.get("env_stores_below", {})
    if not isinstance(below, dict) or not all(isinstance(v, list) and all(isinstance(f, str) and f and "/" not in f
                                                                          for f in v) for v in below.values()):
        raise _broken(path, "'env_stores_below' must be a table of lists of file names")
    return StoreVariables(_strings(table, "env_stores", path), _strings(table, "env_store_patterns", path),
                          tuple((k, tuple(v)) for k, v in below.items()))


def env_stores(env: Mapping[str, str], homes: tuple[str, ...], rules: StoreVariables | None = None) -> tuple[str, ...]:
    """The absolute paths ``env``'s store variables name, in the order of ``env`` (pure but for
    loading the default rules). Relative values are left out: nobody can say relative to what."""
    rules = rules or load_store_variables()
    found: list[str] = []
    for name, value in env.items():
        below = rules.files_below(name)
        if below is None and not (name in rules.names
                                  or any(fnmatch.fnmatchcase(name.upper(), p) for p in rules.patterns)):
            continue
        for path in _paths(value, homes):
            found += [os.path.join(path, f) for f in below] if below is not None else [path]
    return tuple(dict.fromkeys(found))


def _paths(value: str, homes: tuple[str, ...]) -> list[str]:
    out = []
    for part in value.split(os.pathsep):
        part = part.strip()
        if part == "~" or part.startswith("~/"):
            out += [os.path.normpath(home + part[1:]) for home in homes]
        elif os.path.isabs(part):
            out.append(os.path.normpath(part))
    return out


def may_hide(path: str, project: str | None) -> bool:
    """Whether hiding ``path`` (resolved) leaves the sandbox and the file tools usable: never the
    project or a directory holding it, never "/" or a top-level system directory
    (``FOO_CONFIG_DIR=/etc`` is a mistake, not a store)."""
    holds = project is not None and (project == path or project.startswith(path.rstrip("/") + "/"))
    return not holds and os.path.dirname(path) != path and os.path.dirname(path) != "/"

"""Real installs for the install tests: a copy of the checkout, a PATH without compilers, pip's own
cache reused (the tests' isolated HOME would otherwise start it empty)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT, person_pip_cache

COMPILERS = re.compile(r"^(cc|c\+\+|cpp|gcc|g\+\+|clang|clang\+\+|cmake|ninja|make|gmake|ld|ld\.\w+|as|"
                       r"[\w.-]+-(gcc|g\+\+|cc|c\+\+|cpp|ld|as)|(gcc|g\+\+|cpp|clang|clang\+\+)-[\d.]+)$")


def pip_cache() -> str:
    """The person's pip cache (wheels downloaded once serve every test venv; the home check allows it)."""
    return str(person_pip_cache())


def base_python() -> str:
    """The interpreter behind this (virtual) environment: new venvs are made from it, not nested."""
    return getattr(sys, "_base_executable", None) or sys.executable


def copy_checkout(target: Path) -> Path:
    """The files git tracks here (and untracked ones it does not ignore), as a fresh clone would have them."""
    listed = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], check=True, capture_output=True).stdout
    for rel in filter(None, listed.decode().split("\0")):
        source = REPO_ROOT / rel
        if source.is_file():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / rel)
    return target


def path_without_compilers(bin_dir: Path) -> str:
    """A PATH of one directory: links to every program on PATH except compilers, linkers and build tools."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if COMPILERS.match(name) or (bin_dir / name).exists() or not os.access(path, os.X_OK) \
                    or os.path.isdir(path):
                continue
            (bin_dir / name).symlink_to(path)
    return str(bin_dir)


def install_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_CACHE_DIR=pip_cache(), PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env

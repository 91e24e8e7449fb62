"""Test data that ships on npm, fetched at test-setup time with npm itself and cached under .cache/npm.

- GitHub's published REST API description (@octokit/openapi): the fake GitHub server checks every
  request clovercode sends, and every answer it gives, against it.
- GitHub's own workflow parser (@actions/workflow-parser): checks the workflow `ci init` writes.
- The Agent Client Protocol's TypeScript SDK (@agentclientprotocol/sdk): a second client, written by
  nobody here, drives `clovercode acp` (tests/test_acp.py). scripts/setup.sh --tests fetches it.
- OpenAI's Codex CLI (@openai/codex, a native binary, about 420 MB unpacked): the most-used client
  of the Responses API runs `codex exec` against `clovercode serve` (tests/test_serve_codex.py).

Versions are pinned so a test run means the same thing tomorrow; bump them here.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("CLOVER_TEST_NPM_CACHE", REPO_ROOT / ".cache" / "npm"))
OPENAPI_PACKAGE = "@octokit/openapi@23.0.2"
OPENAPI_MEMBER = "package/generated/api.github.com.json"
WORKFLOW_PARSER_PACKAGE = "@actions/workflow-parser@0.3.61"
ACP_SDK_PACKAGE = "@agentclientprotocol/sdk@2.4.0"
CODEX_PACKAGE = "@openai/codex@0.171.0"


class NpmUnavailable(RuntimeError):
    pass


def _npm(*args: str, cwd: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise NpmUnavailable("npm is not installed; scripts/setup.sh installs it (apt-get install npm)")
    proc = subprocess.run([npm, *args, "--no-audit", "--no-fund", "--loglevel=error"], cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise NpmUnavailable(f"npm {' '.join(args)} failed:\n{proc.stderr[-2000:]}")


@contextmanager
def _fetching():
    """One fetch at a time: pytest-xdist workers share the cache, and two `npm install`s into one prefix
    corrupt it."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def github_openapi_path() -> Path:
    """api.github.com.json from @octokit/openapi, downloaded once with `npm pack` (one file is extracted)."""
    target = CACHE / OPENAPI_PACKAGE.replace("/", "+") / "api.github.com.json"
    if target.is_file():
        return target
    with _fetching():
        if not target.is_file():
            _fetch_openapi(target)
    return target


def _fetch_openapi(target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        _npm("pack", OPENAPI_PACKAGE, "--pack-destination", tmp, cwd=Path(tmp))
        tarball = next(Path(tmp).glob("*.tgz"))
        with tarfile.open(tarball) as archive:
            member = archive.extractfile(OPENAPI_MEMBER)
            if member is None:
                raise NpmUnavailable(f"{tarball.name} has no {OPENAPI_MEMBER}")
            partial = Path(tmp) / "api.json"
            partial.write_bytes(member.read())
        json.loads(partial.read_text(encoding="utf-8"))  # a truncated download fails here, not in a test
        os.replace(partial, target)


def workflow_parser_dir() -> Path:
    """A node_modules prefix holding @actions/workflow-parser."""
    prefix = CACHE / WORKFLOW_PARSER_PACKAGE.replace("/", "+")
    installed = prefix / "node_modules" / "@actions" / "workflow-parser" / "package.json"
    if installed.is_file():
        return prefix
    with _fetching():
        if not installed.is_file():
            prefix.mkdir(parents=True, exist_ok=True)
            _npm("install", "--prefix", str(prefix), WORKFLOW_PARSER_PACKAGE, cwd=prefix)
    return prefix


def acp_sdk_dir() -> Path:
    """A node_modules prefix holding @agentclientprotocol/sdk."""
    prefix = CACHE / ACP_SDK_PACKAGE.replace("/", "+")
    installed = prefix / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
    if installed.is_file():
        return prefix
    with _fetching():
        if not installed.is_file():
            prefix.mkdir(parents=True, exist_ok=True)
            _npm("install", "--prefix", str(prefix), ACP_SDK_PACKAGE, cwd=prefix)
    return prefix


def codex_cli() -> Path:
    """The `codex` launcher of @openai/codex (its platform binary comes as an optional dependency)."""
    prefix = CACHE / CODEX_PACKAGE.replace("/", "+")
    launcher = prefix / "node_modules" / ".bin" / "codex"
    if launcher.is_file():
        return launcher
    with _fetching():
        if not launcher.is_file():
            prefix.mkdir(parents=True, exist_ok=True)
            _npm("install", "--prefix", str(prefix), CODEX_PACKAGE, cwd=prefix)
    if not launcher.is_file():
        raise NpmUnavailable(f"{CODEX_PACKAGE} installed no bin/codex")
    return launcher


def fetch_all() -> None:
    """Everything above, fetched once by scripts/setup.sh --tests, so no test run waits on the registry."""
    github_openapi_path()
    workflow_parser_dir()
    acp_sdk_dir()
    codex_cli()

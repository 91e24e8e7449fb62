"""How clovercode runs git so that the repository's own configuration cannot make it run programs.

A repository carries ``.gitattributes`` (cloned with it), and a checkout handed over as a
directory (a CI workspace, an archive, something a command wrote before ``.git`` was read-only)
carries ``.git/config`` too. Both can name programs that git runs on ordinary commands: an fsmonitor
on every status/diff/add, filters on add/checkout, textconv and external diff on diff, hooks, gpg on
commit, ssh/askpass/credential helpers on push. The user's own configuration (system, global, ``-c``
and ``GIT_CONFIG_*``) is theirs; the repository's (``local`` and ``worktree`` scope, with what those
include) is not.

So every git call clovercode makes gets, through ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/
``GIT_CONFIG_VALUE_n`` (which beat the config files and reach GitPython's git processes too):

- :data:`ALWAYS`: what clovercode never needs, switched off whatever its source: fsmonitor, hooks,
  pager, commit/tag/push signing, the ``ext::`` transport;
- :func:`overrides`: for each program-naming key the repository sets, the user's own value again
  (their credential helpers, ssh command, LFS filter), else an inert one.

Diffs also take :data:`DIFF_FLAGS` (external diff and textconv are chosen per file by attributes).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

Pair = tuple[str, str]

ALWAYS: tuple[Pair, ...] = (
    ("core.fsmonitor", "false"),
    ("core.hookspath", "/dev/null"),  # clovercode's own commits, checkouts, pushes run no hooks
    ("core.pager", "cat"),
    ("commit.gpgsign", "false"),
    ("tag.gpgsign", "false"),
    ("push.gpgsign", "false"),
    ("protocol.ext.allow", "never"),  # url.*.insteadOf = "ext::sh -c …" would run a program on push
)
DIFF_FLAGS = ("--no-ext-diff", "--no-textconv")
USER_SCOPES = frozenset({"system", "global", "command"})  # everything else is the repository's

# (pattern on the lower-cased key, the value that runs nothing) for keys naming a program. An empty
# value switches a filter or an askpass off; for the rest it makes git fail rather than run something.
_PROGRAM_KEYS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), v) for p, v in (
    (r"filter\..+\.(clean|smudge|process)", ""),
    (r"filter\..+\.required", "false"),
    (r"diff\..+\.(textconv|command)", ""),
    (r"diff\.external", ""),
    (r"merge\..+\.driver", ""),
    (r"core\.sshcommand", "ssh"),
    (r"core\.askpass", ""),
    (r"core\.editor", "false"),
    (r"sequence\.editor", "false"),
    (r"core\.alternaterefscommand", ""),
    (r"pager\..+", "false"),
    (r"gpg\.(openpgp\.)?program", "gpg"),
    (r"gpg\.x509\.program", "gpgsm"),
    (r"gpg\.ssh\.program", "ssh-keygen"),
    (r"gpg\.ssh\.defaultkeycommand", ""),
))
_CREDENTIAL_HELPER = re.compile(r"credential\.(.+\.)?helper")
_GIT_PROXY = "core.gitproxy"  # multi-valued, first match wins: only the environment overrides it


@dataclass(frozen=True)
class ConfigEntry:
    scope: str  # git config --show-scope: system, global, local, worktree, command
    key: str  # as git lists it: section and variable lower-cased, subsection as written
    value: str


def overrides(entries: Iterable[ConfigEntry]) -> tuple[Pair, ...]:
    """The config clovercode's git calls get, given the configuration git would read (pure)."""
    entries = list(entries)
    user = [e for e in entries if e.scope in USER_SCOPES]
    theirs = [e for e in entries if e.scope not in USER_SCOPES]
    result: list[Pair] = list(ALWAYS)
    if any(_CREDENTIAL_HELPER.fullmatch(e.key.lower()) for e in theirs):
        # helpers form a list an empty value resets; the user's come back in their order
        result.append(("credential.helper", ""))
        result += [(e.key, e.value) for e in user if _CREDENTIAL_HELPER.fullmatch(e.key.lower())]
    done: set[str] = set()
    for entry in theirs:
        key = entry.key.lower()
        inert = _inert_value(key)
        if inert is None or key in done:
            continue
        done.add(key)
        mine = [e.value for e in user if e.key.lower() == key]
        result.append((entry.key, mine[-1] if mine else inert))
    return tuple(result)


def push_flags(entries: Iterable[ConfigEntry], remote: str) -> tuple[str, ...]:
    """Options for ``git push REMOTE``: a program the repository names as ``remote.REMOTE.receivepack``
    (run on this machine for a local or ``file://`` remote) is replaced by the user's, else git's own.
    Config cannot do it: git takes the first receivepack it reads, and the repository's comes first (pure)."""
    key = f"remote.{remote}.receivepack".lower()
    entries = [e for e in entries if e.key.lower() == key]
    if all(e.scope in USER_SCOPES for e in entries):
        return ()
    mine = [e.value for e in entries if e.scope in USER_SCOPES]
    return (f"--receive-pack={mine[0] if mine else 'git-receive-pack'}",)


def _inert_value(key: str) -> str | None:
    for pattern, value in _PROGRAM_KEYS:
        if pattern.fullmatch(key):
            return value
    return None


def config_env(pairs: Iterable[Pair], base: Mapping[str, str]) -> dict[str, str]:
    """``GIT_CONFIG_*`` variables carrying ``pairs`` after those ``base`` already has (pure)."""
    try:
        count = int(base.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:  # git refuses a malformed count; ours replaces it
        count = 0
    env = {}
    for index in range(count):
        if f"GIT_CONFIG_KEY_{index}" not in base:
            count = index  # git would refuse the whole set: keep what is well formed
            break
        env[f"GIT_CONFIG_KEY_{index}"] = base[f"GIT_CONFIG_KEY_{index}"]
        env[f"GIT_CONFIG_VALUE_{index}"] = base.get(f"GIT_CONFIG_VALUE_{index}", "")
    for index, (key, value) in enumerate(pairs, start=count):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return {"GIT_CONFIG_COUNT": str(len(env) // 2), **env}


def read_config(where: Path, base: Mapping[str, str] | None = None) -> list[ConfigEntry]:
    """The configuration git reads in ``where`` with scopes (reading runs no program); [] if git cannot."""
    env = {**(os.environ if base is None else base)}
    env.update(config_env(ALWAYS, env))
    try:
        proc = subprocess.run(["git", "-C", str(where), "config", "--list", "--show-scope", "--includes", "-z"],
                              capture_output=True, env=env, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    if proc.returncode != 0:
        return []
    entries = []
    fields = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
    for scope, item in zip(fields[0::2], fields[1::2]):
        key, _, value = item.partition("\n")
        entries.append(ConfigEntry(scope, key, value))
    return entries


def safe_env(entries: Iterable[ConfigEntry], base: Mapping[str, str]) -> dict[str, str]:
    """Variables to add to ``base`` for git that reads the configuration ``entries`` (pure)."""
    entries = list(entries)
    env = config_env(overrides(entries), base)
    if any(e.scope not in USER_SCOPES and e.key.lower() == _GIT_PROXY for e in entries) \
            and "GIT_PROXY_COMMAND" not in base:
        env["GIT_PROXY_COMMAND"] = ""  # the environment wins over every core.gitProxy; empty means none
    return env


def git_env(where: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables to add to ``base`` (default: this process's environment) for git run in ``where``."""
    base = os.environ if base is None else base
    return safe_env(read_config(where, base), base)


def run(where: Path, *args: str, env: Mapping[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """``git -C where ARGS`` with :func:`git_env`; ``kwargs`` go to :func:`subprocess.run`."""
    base = dict(os.environ if env is None else env)
    base.update(git_env(where, base))
    return subprocess.run(["git", "-C", str(where), *args], env=base, **kwargs)

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

Where data goes is the user's and clovercode's choice too: fetches, pushes and ls-remote run
:func:`detached`, in a throwaway git directory that shares only the objects, so git reads no
repository config at all (no ``insteadOf``/``pushInsteadOf``/``pushurl``, no ``remote "<url>"``
section, no proxy, TLS, resolve, extra header or credential setting), and they go to
:func:`remote_url`, the remote's first configured URL. A local target gets :data:`LOCAL_RECEIVE_PACK`,
which switches its hooks off itself: git drops our ``GIT_CONFIG_*`` for a local receive-pack.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import urlsplit

from clovercode.ground.errors import VcsError

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
# Where git's traffic goes, who can read it and what rides along: a repository's value is replaced by
# the user's, else by the empty value, which git reads as "none" (and, for the lists, as a reset).
_NETWORK_KEYS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), v) for p, v in (
    (r"http\.(.+\.)?proxy.*", ""),
    (r"remote\..+\.proxy.*", ""),
    (r"http\.(.+\.)?sslverify", "true"),
    (r"http\.(.+\.)?curloptresolve", ""),
    (r"http\.(.+\.)?extraheader", ""),
    (r"http\.(.+\.)?followredirects", "initial"),
))
# CA files git has no "none" for: the user's, else the environment's (GIT_SSL_CAINFO beats config)
_CA_KEYS = re.compile(r"http\.(.+\.)?(sslcainfo|sslcapath)")
# Things a checkout persists that are secrets: a token header (actions/checkout), a password in a URL
_PERSISTED = re.compile(r"http\.(.+\.)?extraheader|.+\.(url|pushurl)")
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
        if key in done:
            continue
        done.add(key)
        mine = [e.value for e in user if e.key.lower() == key]
        inert = _inert_value(key)
        if inert is not None:
            result.append((entry.key, mine[-1] if mine else inert))
        elif any(pattern.fullmatch(key) for pattern, _ in _NETWORK_KEYS):
            # lists (extraheader, curloptResolve) are reset by "" and refilled with the user's values
            value = next(v for pattern, v in _NETWORK_KEYS if pattern.fullmatch(key))
            result += [(entry.key, value)] + [(entry.key, v) for v in mine]
        elif _CA_KEYS.fullmatch(key):
            # yours again, else verification on against the system's (GIT_SSL_CAINFO/CAPATH from safe_env)
            result.append((entry.key, mine[-1]) if mine else ("http.sslverify", "true"))
    return tuple(result)


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


def config_pairs(env: Mapping[str, str]) -> list[Pair]:
    """The ``GIT_CONFIG_*`` pairs ``env`` carries, in order (pure)."""
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        return []
    return [(env[f"GIT_CONFIG_KEY_{i}"], env.get(f"GIT_CONFIG_VALUE_{i}", "")) for i in range(count)
            if f"GIT_CONFIG_KEY_{i}" in env]


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
    # GIT_SSL_CAINFO/CAPATH beat every http.*.sslCAInfo: a repository's, however specific its URL,
    # gives way to your general value, else to the system's
    theirs_ca = {m.group(2) for e in entries if e.scope not in USER_SCOPES and (m := _CA_KEYS.fullmatch(e.key.lower()))}
    for name, var, default in (("sslcainfo", "GIT_SSL_CAINFO", _SYSTEM_CA.cafile),
                               ("sslcapath", "GIT_SSL_CAPATH", _SYSTEM_CA.capath)):
        mine = [e.value for e in entries if e.scope in USER_SCOPES and e.key.lower() == f"http.{name}"]
        value = mine[-1] if mine else default
        if name in theirs_ca and var not in base and value:
            env[var] = value
    return env


class _SystemCA:
    """The system's CA bundle and directory (what git uses when no config names one)."""

    @property
    def cafile(self) -> str:
        return _first_existing(os.environ.get("SSL_CERT_FILE", ""), "/etc/ssl/certs/ca-certificates.crt",
                               "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")

    @property
    def capath(self) -> str:
        return _first_existing(os.environ.get("SSL_CERT_DIR", ""), "/etc/ssl/certs")


def _first_existing(*paths: str) -> str:
    return next((p for p in paths if p and os.path.exists(p)), "")


_SYSTEM_CA = _SystemCA()


def git_env(where: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables to add to ``base`` (default: this process's environment) for git run in ``where``;
    a VcsError for a repository whose own config moves its work tree (:func:`check_layout`)."""
    base = os.environ if base is None else base
    entries = read_config(where, base)
    check_layout(where, entries, base)
    return safe_env(entries, base)


# -- where the work tree is ----------------------------------------------------------------------------

LAYOUT_KEYS = ("core.worktree", "core.bare")


def check_layout(where: Path, entries: Iterable[ConfigEntry], base: Mapping[str, str]) -> None:
    """Refuse a repository whose own config (``local``/``worktree`` scope) moves the work tree away
    from the directory holding its ``.git`` (``core.worktree``) or calls it bare (``core.bare``).

    Everything that protects the tree (CI definitions, the hooks directory, what ``fix`` commits,
    checkpoints) is computed from where git says the tree is; a handed-over ``.git/config`` with
    ``core.worktree = /elsewhere`` would point all of it at another directory. A submodule's own
    ``core.worktree`` names the directory holding its ``.git`` file, and passes. ``GIT_DIR`` or
    ``GIT_WORK_TREE`` in the environment are the user's word and win."""
    if "GIT_DIR" in base or "GIT_WORK_TREE" in base:
        return
    theirs = {e.key.lower(): e for e in entries if e.scope not in USER_SCOPES and e.key.lower() in LAYOUT_KEYS}
    if not theirs:
        return
    top = dotgit_top(Path(os.path.realpath(where)))
    if top is None:
        return  # a bare repository, or not one: nothing to move
    bare = theirs.get("core.bare")
    if bare is not None and bare.value.strip().lower() in ("", "true", "yes", "on", "1"):
        raise _moved(top, "core.bare", bare.value)
    moved = theirs.get("core.worktree")
    if moved is None:
        return
    env = {**base, **config_env(ALWAYS, base)}
    try:
        proc = subprocess.run(["git", "-C", str(top), "rev-parse", "--path-format=absolute", "--show-toplevel"],
                              capture_output=True, text=True, env=env, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        raise _moved(top, "core.worktree", moved.value) from None
    if proc.returncode != 0 or os.path.realpath(proc.stdout.strip()) != str(top):
        raise _moved(top, "core.worktree", moved.value)


def dotgit_top(path: Path) -> Path | None:
    """The nearest directory at or above ``path`` holding a ``.git`` entry; None inside a git
    directory or outside a repository."""
    for here in (path, *path.parents):
        if here.name == ".git":
            return None
        if os.path.lexists(here / ".git"):
            return here
    return None


def _moved(top: Path, key: str, value: str) -> VcsError:
    return VcsError(f"the repository's config ({top}/.git) sets {key} = {value!r}, which moves git's work tree away "
                    f"from {top}; clovercode does not work in such a repository, because what it protects and "
                    "commits would be computed for another directory",
                    hint=f"If you did not set it (a handed-over checkout can carry it), remove it: "
                         f"git -C {top} config --unset {key}. If you did, run clovercode in the work tree itself.")


def run(where: Path, *args: str, env: Mapping[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """``git -C where ARGS`` with :func:`git_env`; ``kwargs`` go to :func:`subprocess.run`."""
    base = dict(os.environ if env is None else env)
    base.update(git_env(where, base))
    return subprocess.run(["git", "-C", str(where), *args], env=base, **kwargs)


# -- where fetches and pushes go ---------------------------------------------------------------------

# A local receive-pack runs the target repository's hooks as this user, and git hands it none of our
# GIT_CONFIG_*; so the receiving command switches them (and the other programs its config can name) off.
LOCAL_RECEIVE_PACK = ("git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.alternateRefsCommand=true "
                      "-c receive.denyCurrentBranch=refuse -c receive.autogc=false receive-pack")
LOCAL_UPLOAD_PACK = "git -c core.hooksPath=/dev/null -c core.alternateRefsCommand=true upload-pack"


def remote_url(entries: Iterable[ConfigEntry], remote: str) -> str | None:
    """The first ``remote.REMOTE.url`` as configured (None: no such remote); a VcsError for a URL
    git would read as an option. ``pushurl`` and rewrites are not applied: they are where a
    repository's config would send the push elsewhere (pure)."""
    urls = [e.value for e in entries if e.key.lower() == f"remote.{remote}.url".lower()]
    if not urls:
        return None
    if urls[0].startswith("-") or not urls[0].strip():
        raise VcsError(f"the URL of remote '{remote}' is not a URL: {urls[0]!r}",
                       hint=f"Set it: git remote set-url {remote} URL.")
    return urls[0]


def is_local(url: str) -> bool:
    """Whether git reaches ``url`` by running a program on this machine (a path or file://) (pure)."""
    if "://" in url:
        return url.lower().startswith("file://")
    head, colon, _ = url.partition(":")
    return not colon or "/" in head  # "host:path" and "user@host:path" are ssh


def transport_flags(url: str, command: str) -> tuple[str, ...]:
    """``--receive-pack``/``--upload-pack`` for a local ``url`` (``command``: push, fetch, ls-remote) (pure)."""
    if not is_local(url):
        return ()
    return (f"--receive-pack={LOCAL_RECEIVE_PACK}",) if command == "push" else (f"--upload-pack={LOCAL_UPLOAD_PACK}",)


def persisted_credentials(entries: Iterable[ConfigEntry]) -> list[str]:
    """Keys of the repository's config that hold a secret a checkout left there: an extra HTTP
    header, a URL with a password (pure; the values are never shown)."""
    found = []
    for entry in entries:
        key = entry.key.lower()
        if entry.scope in USER_SCOPES or not _PERSISTED.fullmatch(key) or entry.key in found:
            continue
        if key.endswith("url") and not _has_password(entry.value):
            continue
        found.append(entry.key)
    return found


def _has_password(url: str) -> bool:
    try:
        return bool(urlsplit(url).password)
    except ValueError:
        return False


@contextmanager
def detached(top: Path, base: Mapping[str, str] | None = None) -> Iterator[dict[str, str]]:
    """The environment for one network command (fetch, push, ls-remote) of the work tree ``top``:
    git runs in a throwaway git directory that reads the repository's objects and shallow list and
    none of its config, refs or hooks. A shallow list the command extends is copied back."""
    base = dict(os.environ if base is None else base)
    common = _common_dir(top, base)
    with tempfile.TemporaryDirectory(prefix="clovercode-git-") as scratch:
        shadow = Path(scratch) / "git"
        (shadow / "refs").mkdir(parents=True)
        (shadow / "objects").mkdir()
        (shadow / "HEAD").write_text("ref: refs/heads/clovercode-detached\n")
        (shadow / "config").write_text(_shadow_config(top, base))
        shallow = common / "shallow"
        before = shallow.read_bytes() if shallow.is_file() else None
        if before is not None:
            (shadow / "shallow").write_bytes(before)
        env = {name: value for name, value in base.items() if not name.startswith("GIT_") or name.startswith(
            ("GIT_CONFIG_", "GIT_SSH", "GIT_ASKPASS", "GIT_TERMINAL_PROMPT", "GIT_SSL_", "GIT_PROXY", "GIT_TRACE"))}
        env.update(config_env(ALWAYS, env))
        env.update({"GIT_DIR": str(shadow), "GIT_OBJECT_DIRECTORY": str(common / "objects"),
                    "GIT_CEILING_DIRECTORIES": scratch})
        yield env
        after = (shadow / "shallow").read_bytes() if (shadow / "shallow").is_file() else None
        if after is not None and after != before:
            staged = common / "shallow.clovercode"
            staged.write_bytes(after)
            os.replace(staged, shallow)


def _common_dir(top: Path, base: Mapping[str, str]) -> Path:
    proc = run(top, "rev-parse", "--path-format=absolute", "--git-common-dir", env=base, capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise VcsError(f"git cannot read the repository at {top}: {proc.stderr.strip()}")
    return Path(proc.stdout.strip())


def _shadow_config(top: Path, base: Mapping[str, str]) -> str:
    """The format the objects need (sha256 repositories), nothing else of the repository's config."""
    proc = run(top, "config", "--get", "extensions.objectformat", env=base, capture_output=True, text=True)
    fmt = proc.stdout.strip() if proc.returncode == 0 else ""
    if fmt and not re.fullmatch(r"sha1|sha256", fmt):
        raise VcsError(f"unknown object format {fmt!r} in the repository's config")
    head = "[core]\n\trepositoryformatversion = {}\n\tbare = true\n".format(1 if fmt else 0)
    return head + (f"[extensions]\n\tobjectformat = {fmt}\n" if fmt else "")


def shown_url(url: str) -> str:
    """``url`` fit for a screen or a log: a password in it is replaced by ``***`` (pure)."""
    if not _has_password(url):
        return url
    parts = urlsplit(url)
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()

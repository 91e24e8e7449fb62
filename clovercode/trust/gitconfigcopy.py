"""Git config as sandboxed commands see it: rebuilt from an allowlist, never a scrubbed original.

A git config file is where tokens end up in places nobody thought to scrub: a rewrite rule
``[url "https://user:TOKEN@github.com/"]``, a token used as the user name of a remote URL,
``sendemail.smtpPass``, ``github.token``, an extra header, a credential helper with the password in
its script, a key of some other tool. So the copy bound over ``~/.gitconfig``, ``~/.config/git/config``
and the project's ``.git/config`` holds only keys on :data:`ALLOWED`: each known to carry no secret
and to make git run no program, each value checked against the shape it must have. Everything else
is dropped, includes are not followed, and remote URLs keep no user name, password, query or
fragment. docs/security.md, "Git config in the sandbox", gives the reason for each key.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path
from typing import Callable, Iterable
from urllib.parse import urlsplit

Entry = tuple[str, "str | None"]  # (key as git lists it, value; None for a key written without "=")
Check = Callable[["str | None"], "str | None"]  # the value to write (None: a bare key), or raise _Drop

BOOL_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "1", "0", ""})
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")  # a remote or submodule name used as a value
_WORD = re.compile(r"[A-Za-z0-9 ._,:/+*#-]{0,200}")  # short plain values: refs, colours, modes
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}")
_USERINFO = re.compile(r"[^\s/@]+@[^\s/]")  # "user@host" or "user:pass@host" anywhere in a value
_PASSWORD = re.compile(r"[^\s/:@]+:[^\s/@]+@")  # "user:pass@"
_KNOWN_USER = "git"  # the user name every git host's SSH URLs use; any other may be a token
URL_SCHEMES = frozenset({"https", "http", "ssh", "git", "file"})


class _Drop(Exception):
    pass


def _bool(value: str | None) -> str | None:
    if value is not None and value.lower() not in BOOL_WORDS:
        raise _Drop
    return value


def _one_of(*words: str, boolean: bool = False) -> Check:
    def check(value: str | None) -> str | None:
        if value is not None and value.lower() in words:
            return value
        if boolean:
            return _bool(value)
        raise _Drop
    return check


def _pattern(regex: re.Pattern[str]) -> Check:
    def check(value: str | None) -> str | None:
        if value is None or not regex.fullmatch(value) or "://" in value:
            raise _Drop
        return value
    return check


def _text(value: str | None) -> str | None:
    """One line of free text (a name, an e-mail address) that is not a URL with credentials."""
    if value is None or len(value) > 200 or "://" in value or _PASSWORD.search(value):
        raise _Drop
    return value


def _alias(value: str | None) -> str | None:
    # "!…" is a shell command; "-c …" would set config (git refuses that in an alias, but never mind)
    if value is None or value.lstrip().startswith(("!", "-")) or "://" in value or _USERINFO.search(value):
        raise _Drop
    return value


def _path(value: str | None) -> str | None:
    if value is None or "://" in value or _USERINFO.search(value):
        raise _Drop
    return value


def clean_url(url: str) -> str:
    """``url`` with no credentials: scheme URLs lose user, password, query and fragment; scp-like
    ``user@host:path`` keeps only the user ``git``; transports that run a program (``ext::``,
    ``fd::``, any ``<helper>::``) and unknown schemes are refused (ValueError)."""
    url = url.strip()
    if not url or url.startswith("-") or "::" in url:
        raise ValueError("not a plain URL")
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme.lower() not in URL_SCHEMES:
            raise ValueError("unknown scheme")
        host = parts.hostname or ""
        if host and not _HOST.fullmatch(host):
            host = f"[{host}]" if re.fullmatch(r"[0-9A-Fa-f:.]+", host) else ""
            if not host:
                raise ValueError("odd host")
        user = f"{_KNOWN_USER}@" if parts.username == _KNOWN_USER and parts.scheme.lower() in ("ssh", "git") else ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{user}{host}{port}{parts.path}"
    head, colon, path = url.partition(":")
    if colon and "/" not in head:  # scp-like [user@]host:path
        user, at, host = head.rpartition("@")
        if not _HOST.fullmatch(host):
            raise ValueError("odd host")
        return f"{_KNOWN_USER}@{host}:{path}" if at and user == _KNOWN_USER else f"{host}:{path}"
    if "@" in url:
        raise ValueError("a local path with an @")
    return url


def _url(value: str | None) -> str | None:
    try:
        return clean_url(value or "")
    except ValueError:
        raise _Drop from None


# (section, variable) -> check, for keys without a subsection; ("section", "*") allows every variable.
# The reason for each is in docs/security.md ("Git config in the sandbox"); anything not here is dropped.
ALLOWED: dict[tuple[str, str], Check] = {
    ("user", "name"): _text, ("user", "email"): _text, ("user", "useconfigonly"): _bool,
    ("author", "name"): _text, ("author", "email"): _text,
    ("committer", "name"): _text, ("committer", "email"): _text,
    ("core", "repositoryformatversion"): _one_of("0", "1"),
    ("core", "filemode"): _bool, ("core", "autocrlf"): _one_of("input", boolean=True),
    ("core", "eol"): _one_of("lf", "crlf", "native"), ("core", "safecrlf"): _one_of("warn", boolean=True),
    ("core", "ignorecase"): _bool, ("core", "precomposeunicode"): _bool, ("core", "quotepath"): _bool,
    ("core", "symlinks"): _bool, ("core", "logallrefupdates"): _one_of("always", boolean=True),
    ("core", "checkstat"): _one_of("default", "minimal"), ("core", "trustctime"): _bool,
    ("core", "untrackedcache"): _one_of("keep", boolean=True), ("core", "preloadindex"): _bool,
    ("core", "commitgraph"): _bool, ("core", "multipackindex"): _bool, ("core", "splitindex"): _bool,
    ("core", "sparsecheckout"): _bool, ("core", "sparsecheckoutcone"): _bool,
    ("core", "protecthfs"): _bool, ("core", "protectntfs"): _bool,
    ("core", "abbrev"): _pattern(re.compile(r"auto|no|\d{1,2}")), ("core", "whitespace"): _pattern(_WORD),
    ("extensions", "objectformat"): _one_of("sha1", "sha256"),
    ("extensions", "compatobjectformat"): _one_of("sha1", "sha256"),
    ("extensions", "refstorage"): _one_of("files", "reftable"),
    ("extensions", "worktreeconfig"): _bool, ("extensions", "preciousobjects"): _bool,
    ("extensions", "partialclone"): _pattern(_NAME), ("extensions", "noop"): _bool,
    ("init", "defaultbranch"): _pattern(_NAME),
    ("alias", "*"): _alias,
    ("color", "*"): _pattern(_WORD),
    ("diff", "renames"): _one_of("copies", "copy", boolean=True), ("diff", "renamelimit"): _pattern(re.compile(r"\d{1,7}")),
    ("diff", "algorithm"): _one_of("default", "myers", "minimal", "patience", "histogram"),
    ("diff", "colormoved"): _pattern(_WORD), ("diff", "colormovedws"): _pattern(_WORD),
    ("diff", "indentheuristic"): _bool, ("diff", "mnemonicprefix"): _bool,
    ("diff", "context"): _pattern(re.compile(r"\d{1,4}")), ("diff", "interhunkcontext"): _pattern(re.compile(r"\d{1,4}")),
    ("merge", "conflictstyle"): _one_of("merge", "diff3", "zdiff3"), ("merge", "ff"): _one_of("only", boolean=True),
    ("merge", "renames"): _bool,
    ("pull", "rebase"): _one_of("merges", boolean=True), ("pull", "ff"): _one_of("only", boolean=True),
    ("push", "default"): _one_of("nothing", "current", "upstream", "tracking", "simple", "matching"),
    ("push", "autosetupremote"): _bool, ("push", "followtags"): _bool,
    ("fetch", "prune"): _bool, ("fetch", "prunetags"): _bool, ("fetch", "fsckobjects"): _bool,
    ("transfer", "fsckobjects"): _bool, ("receive", "fsckobjects"): _bool,
    ("rebase", "autosquash"): _bool, ("rebase", "autostash"): _bool, ("rebase", "updaterefs"): _bool,
    ("status", "showuntrackedfiles"): _one_of("no", "normal", "all"), ("status", "short"): _bool,
    ("status", "branch"): _bool,
    ("branch", "autosetupmerge"): _one_of("always", "inherit", "simple", boolean=True),
    ("branch", "autosetuprebase"): _one_of("never", "local", "remote", "always"),
    ("safe", "directory"): _path,
}
# (section, variable) -> check, for keys of a named subsection ([remote "origin"], [branch "main"] …)
ALLOWED_IN_SUBSECTION: dict[tuple[str, str], Check] = {
    ("color", "*"): _pattern(_WORD),
    ("branch", "remote"): _pattern(_NAME), ("branch", "pushremote"): _pattern(_NAME),
    ("branch", "merge"): _pattern(_WORD), ("branch", "rebase"): _one_of("merges", boolean=True),
    ("remote", "url"): _url, ("remote", "fetch"): _pattern(_WORD),
    ("remote", "tagopt"): _one_of("--tags", "--no-tags"), ("remote", "prune"): _bool,
    ("remote", "promisor"): _bool, ("remote", "partialclonefilter"): _pattern(_WORD), ("remote", "mirror"): _bool,
    ("submodule", "url"): _url, ("submodule", "active"): _bool, ("submodule", "branch"): _pattern(_WORD),
    ("submodule", "update"): _one_of("checkout", "rebase", "merge", "none"),
}
_VARIABLE_NAME = re.compile(r"[a-z][a-z0-9-]*")


def rebuild_config(entries: Iterable[Entry]) -> str:
    """A git config file holding only the allowed ``entries``, sections in the order first met (pure)."""
    sections: dict[tuple[str, str | None], list[tuple[str, str | None]]] = {}
    for key, value in entries:
        parsed = _split(key)
        if parsed is None:
            continue
        section, subsection, variable = parsed
        table = ALLOWED if subsection is None else ALLOWED_IN_SUBSECTION
        check = table.get((section, variable)) or table.get((section, "*"))
        if check is None or (value is not None and not _printable(value)):
            continue
        try:
            kept = check(value)
        except _Drop:
            continue
        sections.setdefault((section, subsection), []).append((variable, kept))
    out = []
    for (section, subsection), variables in sections.items():
        out.append(f"[{section}]\n" if subsection is None else f'[{section} "{_escape(subsection)}"]\n')
        out += [f"\t{name}\n" if value is None else f'\t{name} = "{_escape(value)}"\n' for name, value in variables]
    return "".join(out)


def _split(key: str) -> tuple[str, str | None, str] | None:
    section, dot, rest = key.partition(".")
    if not dot:
        return None
    subsection, dot, variable = rest.rpartition(".")
    variable = variable.lower()
    if not _VARIABLE_NAME.fullmatch(variable) or not re.fullmatch(r"[a-z0-9-]+", section.lower()):
        return None
    if dot and not _printable(subsection):
        return None
    return section.lower(), (subsection if dot else None), variable


def _printable(text: str) -> bool:
    return all(ch == "\t" or (ch >= " " and ch != "\x7f") for ch in text)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t")


def read_entries(path: Path) -> list[Entry]:
    """The entries of the config file ``path`` as git parses it, includes not followed; [] when git
    cannot read it (the copy is then empty). Reading runs no program."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull})
    try:
        proc = subprocess.run(["git", "config", "--file", str(path), "--no-includes", "--list", "-z"],
                              capture_output=True, env=env, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return []
    if proc.returncode != 0:
        return []
    entries: list[Entry] = []
    for item in proc.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if item:
            key, newline, value = item.partition("\n")
            entries.append((key, value if newline else None))
    return entries


def rebuilt_copy(path: Path) -> str:
    """The text of ``path`` rebuilt from the allowlist (what a sandboxed command reads there). Every
    sandboxed command asks for the same few files: the answer is kept while the file's identity,
    size and change times stay (whatever it is, it passed the allowlist)."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    return _rebuilt(str(path), (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))


@functools.lru_cache(maxsize=32)
def _rebuilt(path: str, stamp: tuple[int, int, int, int]) -> str:
    return rebuild_config(read_entries(Path(path)))

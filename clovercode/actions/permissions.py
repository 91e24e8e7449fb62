"""Allow rules for commands, by allowlist (issue 45 point 6).

"Always" saves one of two kinds of rule:

- a **prefix** rule (``git status *``): the command's words start with the rule's. Offered only
  for the programs and subcommands in :data:`SAFE_PREFIXES`, known to run no other program and
  destroy no data (``git status``, ``ls``, ``pytest``, ``python3 -m unittest``, ``npm test``), and
  matched only when none of that program's options that would run a program or write a file
  (``rg --pre``, ``git diff --output``, ``go test -exec``) is among the words;
- an **exact** rule (``rm -rf build``): that command, word for word, and nothing else. Every other
  program gets one: ``rm``, ``curl``, ``pip install``, ``docker run``, and every wrapper that runs
  what follows it (``taskset``, ``ionice``, ``nice``, ``timeout``, ``env``, ``sudo``, ``sh -c``, ``npx``).

A compound command (``;``, ``&&``, pipes, redirections, substitutions, globs, several lines) gets
no rule and never matches one: ``pytest; rm -rf ~`` must not ride on ``pytest``.

Rules in the user's config: an entry ending in `` *`` is a prefix rule; an entry without it is a
prefix rule when it names an allowlisted prefix (``git status``, as older versions saved them),
else exact. A prefix entry for a program off the list (``taskset *``, ``make *``) is honoured only as
far as the list allows: for a wrapper, never; for others (the user wrote it), yes.
"""

from __future__ import annotations

import re
import shlex
from typing import Iterable

SHELL_SYNTAX = set(";&|<>`$(){}\n*?!")
PREFIX_MARK = " *"

# pytest's options that delete a directory (--basetemp is emptied first) or overwrite a file.
PYTEST_WRITES = ("--basetemp", "--junitxml", "--junit-xml", "--result-log", "--report-log", "--cov-report",
                 "--pastebin", "-p")
# The prefixes "always" may save as prefixes, each with the options that would make it run another
# program or write a file (a word equal to one, or starting with it and "="), which a match refuses.
SAFE_PREFIXES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("ls",): (), ("cat",): (), ("head",): (), ("tail",): (), ("wc",): (), ("pwd",): (), ("echo",): (),
    ("stat",): (), ("du",): (), ("df",): (), ("which",): (), ("diff",): (), ("grep",): (),
    ("rg",): ("--pre", "--pre-glob", "--search-zip", "-z"),
    ("git", "status"): (), ("git", "diff"): ("--output", "--ext-diff"), ("git", "log"): ("--output", "--ext-diff"),
    ("git", "show"): ("--output", "--ext-diff"),
    ("pytest",): PYTEST_WRITES, ("py.test",): PYTEST_WRITES,
    ("npm", "test"): ("--script-shell",), ("yarn", "test"): (), ("pnpm", "test"): ("--script-shell",),
    ("cargo", "test"): ("--config", "-Z"), ("go", "test"): ("-exec", "-toolexec", "-o"), ("go", "vet"): ("-vettool",),
}
# An interpreter's test modules: `python3 -m pytest *`, `python -m unittest *`.
SAFE_MODULES = ("pytest", "unittest")
# Runners that run the allowlisted command after them in the project's environment.
RUNNERS = {("uv", "run"), ("poetry", "run"), ("pipenv", "run"), ("pdm", "run"), ("hatch", "run")}
# Programs that run what follows them, or change who or how it runs: never a prefix, even one the
# user wrote (an older version saved `taskset` from ACP, then `taskset -c 0 touch X` ran unasked).
WRAPPERS = {"env", "sudo", "doas", "su", "xargs", "timeout", "nice", "nohup", "exec", "command", "builtin", "eval",
            "time", "watch", "strace", "ltrace", "find", "parallel", "ssh", "chroot", "unshare", "flock", "setsid",
            "stdbuf", "script", "busybox", "taskset", "ionice", "chrt", "gdb", "lldb", "valgrind", "screen", "tmux",
            "fakeroot", "systemd-run", "firejail", "bwrap", "nsenter", "runuser", "sg", "newgrp", "npx", "bunx",
            "pnpx", "sed", "awk", "gawk", "mawk", "perl", "python", "python3", "sh", "bash", "zsh", "dash", "ksh",
            "fish", "node", "ruby", "docker", "podman", "kubectl", "make", "cmake", "ninja", "cgexec", "numactl",
            "prlimit", "caffeinate", "catchsegv", "proxychains", "torsocks", "entr", "inotifywait", "dbus-launch"}


def _words(command: str) -> list[str] | None:
    if any(ch in SHELL_SYNTAX for ch in command):
        return None
    try:
        return shlex.split(command)
    except ValueError:
        return None


def _interpreter(word: str) -> bool:
    return bool(re.fullmatch(r"python(\d(\.\d+)?)?|pypy\d?(\.\d+)?", word.rsplit("/", 1)[-1]))


def _safe_prefix(words: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The allowlisted prefix ``words`` start with, and the options it refuses; None if none."""
    for runner in RUNNERS:
        if tuple(words[:len(runner)]) == runner:
            inner = _safe_prefix(words[len(runner):])
            return (runner + inner[0], inner[1]) if inner else None
    if len(words) >= 3 and _interpreter(words[0]) and words[1] == "-m" and words[2] in SAFE_MODULES:
        return tuple(words[:3]), PYTEST_WRITES
    for length in (2, 1):
        key = tuple(words[:length])
        if len(key) == length and key in SAFE_PREFIXES:
            return key, SAFE_PREFIXES[key]
    return None


def command_rule(command: str) -> str | None:
    """The rule "always" saves for ``command``: ``git status *`` (a prefix, for an allowlisted
    program) or the command itself, exactly (``rm -rf build``). None for a compound command."""
    words = _words(command)
    if not words:
        return None
    safe = _safe_prefix(words)
    if safe is not None and not _refused(words, safe[1]):
        return " ".join(safe[0]) + PREFIX_MARK
    return shlex.join(words)


def is_prefix(rule: str) -> bool:
    """Whether a rule (from "always" or the user's config) matches by prefix."""
    if rule.endswith(PREFIX_MARK):
        return True
    words = _words(rule)
    return bool(words) and (safe := _safe_prefix(words)) is not None and list(safe[0]) == words


def describe(rule: str) -> str:
    """How a question names a rule: "commands starting `git status`" or "exactly `rm -rf build`"."""
    if is_prefix(rule):
        return f"commands starting `{rule.removesuffix(PREFIX_MARK)}`"
    return f"exactly `{rule}`"


def _refused(words: list[str], options: tuple[str, ...]) -> bool:
    return any(word == option or word.startswith(option + "=") or (len(option) == 2 and word.startswith(option))
               for word in words for option in options)


def allowed(command: str, rules: Iterable[str]) -> str | None:
    """The rule that allows ``command``, or None."""
    words = _words(command)
    if not words:
        return None
    for rule in rules:
        rule_words = _words(rule.removesuffix(PREFIX_MARK))
        if not rule_words:
            continue
        if words == rule_words:
            return rule
        if not is_prefix(rule) or words[:len(rule_words)] != rule_words:
            continue
        if words[0].rsplit("/", 1)[-1] in WRAPPERS and not _safe_prefix(words):
            continue  # a wrapper's prefix rule runs anything after it: exact only
        safe = _safe_prefix(words)
        if safe is not None and _refused(words, safe[1]):
            continue  # `git diff --output=…` is not what `git diff *` allows
        return rule
    return None

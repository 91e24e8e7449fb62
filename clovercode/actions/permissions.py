"""Allow rules for commands: a rule is a command prefix (``git status``, ``npm test``); a command
matches when its words start with the rule's words. A compound command (``;``, ``&&``, pipes,
redirections, substitutions) never matches: ``pytest; rm -rf ~`` must not ride on ``pytest``."""

from __future__ import annotations

import re
import shlex
from typing import Iterable

SHELL_SYNTAX = set(";&|<>`$(){}\n*?!")
MAX_PREFIX_WORDS = 2


def _words(command: str) -> list[str] | None:
    if any(ch in SHELL_SYNTAX for ch in command):
        return None
    try:
        return shlex.split(command)
    except ValueError:
        return None


# Programs that run what their arguments name: a rule must name the script or module too
# (`python3 -m unittest`), never the bare interpreter, which would allow every script.
INTERPRETERS = {"python", "python2", "python3", "pypy", "pypy3", "node", "deno", "bun", "ruby", "perl", "php",
                "bash", "sh", "zsh", "dash", "ksh", "fish", "pwsh", "lua", "Rscript", "tclsh", "osascript"}
# Programs that run another command given after them: the rule is theirs plus that command's.
RUNNERS = {("uv", "run"), ("poetry", "run"), ("pipenv", "run"), ("pdm", "run"), ("hatch", "run"), ("npx",),
           ("bunx",), ("pnpm", "exec"), ("pnpm", "dlx"), ("yarn", "dlx"), ("cargo", "run")}
# Package scripts: the script's name is part of the rule (`npm run test:unit`, not `npm run`).
SCRIPT_RUNNERS = {("npm", "run"), ("npm", "run-script"), ("pnpm", "run"), ("yarn", "run"), ("bun", "run")}
# Tools whose first word picks what they do: without that word no rule (a bare `git` would allow `git push`).
SUBCOMMAND_TOOLS = {"git", "npm", "pnpm", "yarn", "cargo", "go", "docker", "podman", "kubectl", "gh", "pip", "pip3",
                    "uv", "poetry", "conda", "brew", "apt", "apt-get", "dotnet", "mvn", "gradle", "terraform"}
# Programs that run whatever follows them, or change who runs it: never a rule.
WRAPPERS = {"env", "sudo", "doas", "su", "xargs", "timeout", "nice", "nohup", "exec", "command", "builtin", "eval",
            "time", "watch", "strace", "ltrace", "find", "parallel", "ssh", "chroot", "unshare", "flock", "setsid",
            "stdbuf", "script", "busybox"}


def _interpreter(word: str) -> bool:
    name = word.rsplit("/", 1)[-1]
    return name in INTERPRETERS or bool(re.fullmatch(r"python\d(\.\d+)?|pypy\d?(\.\d+)?|node\d*", name))


def command_prefix(command: str) -> str | None:
    """The rule 'always allow' offers for ``command``: the narrowest that is still useful, as Claude
    Code offers `npm run test:*`. A program and its subcommand (`git status`); an interpreter with its
    module or script (`python3 -m unittest`, `bash run.sh`); a package script (`npm run test:unit`);
    a runner with the rule of what it runs (`uv run pytest`). None when no rule can be safe: a
    compound command, an assignment first, a wrapper (`sudo`, `env`, `xargs`), an interpreter given
    code inline (`python3 -c`, `bash -c`) or nothing to run, a subcommand tool without its subcommand."""
    words = _words(command)
    return _prefix(words) if words and "=" not in words[0] else None


def _prefix(words: list[str]) -> str | None:
    if not words:
        return None
    program = words[0]
    if program.startswith("-") or program.rsplit("/", 1)[-1] in WRAPPERS:
        return None
    for runner in sorted(RUNNERS | SCRIPT_RUNNERS, key=len, reverse=True):
        if tuple(words[:len(runner)]) == runner:
            rest = words[len(runner):]
            if runner in SCRIPT_RUNNERS:
                return " ".join([*runner, rest[0]]) if rest and not rest[0].startswith("-") else None
            inner = _prefix(rest)
            return " ".join([*runner, inner]) if inner else None
    if _interpreter(program):
        if len(words) >= 3 and words[1] == "-m" and not words[2].startswith("-"):
            return " ".join(words[:3])
        if len(words) >= 2 and not words[1].startswith("-"):
            return " ".join(words[:2])
        return None  # inline code (-c, -e), options first, or a bare interpreter (reads its stdin)
    prefix = [program]
    for word in words[1:MAX_PREFIX_WORDS]:
        if word.startswith("-") or any(ch in word for ch in "/.=:~"):
            break
        prefix.append(word)
    if len(prefix) == 1 and program in SUBCOMMAND_TOOLS:
        return None
    return " ".join(prefix)


def allowed(command: str, rules: Iterable[str]) -> str | None:
    """The rule that allows ``command``, or None."""
    words = _words(command)
    if not words:
        return None
    for rule in rules:
        rule_words = rule.split()
        if rule_words and words[:len(rule_words)] == rule_words:
            return rule
    return None

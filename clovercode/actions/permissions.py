"""Allow rules for commands: a rule is a command prefix (``git status``, ``npm test``); a command
matches when its words start with the rule's words. A compound command (``;``, ``&&``, pipes,
redirections, substitutions) never matches: ``pytest; rm -rf ~`` must not ride on ``pytest``."""

from __future__ import annotations

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


def command_prefix(command: str) -> str | None:
    """The rule 'always allow' offers for ``command``: its program and, when the next word looks
    like a subcommand (not an option, path or assignment), that too. None when no rule can be safe."""
    words = _words(command)
    if not words or "=" in words[0]:
        return None
    prefix = [words[0]]
    for word in words[1:MAX_PREFIX_WORDS]:
        if word.startswith("-") or any(ch in word for ch in "/.=:~"):
            break
        prefix.append(word)
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

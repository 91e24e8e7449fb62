"""``[[hooks.EVENT]]`` tables → HookConfig, checked when the config loads (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from clovercode.ground.errors import ConfigError
from clovercode.trust.terminal import inert

EVENTS = ("pre_tool_use", "post_tool_use", "stop")
DEFAULT_TIMEOUT = 60.0
KEYS = {"command", "matcher", "timeout", "env"}
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class HookConfig:
    event: str  # one of EVENTS
    command: str  # a shell line, run with /bin/sh -c in the project directory
    matcher: str = ""  # '' or '*': every tool; else the exact tool name or a regex on the whole name
    timeout: float = DEFAULT_TIMEOUT
    source: str = ""
    env: tuple[str, ...] = ()  # variables passed from clovercode's environment beyond the sandbox's allowlist

    def matches(self, tool: str) -> bool:
        # The exact name counts too: an MCP tool's name may hold regex characters (`a.b+c`).
        return every_tool(self.matcher) or self.matcher == tool or re.fullmatch(self.matcher, tool) is not None


def every_tool(matcher: str) -> bool:
    """``*`` (as in Claude Code) and an empty matcher mean every tool; ``*`` alone is no regex."""
    return matcher.strip() in ("", "*")


def parse_hooks(event: str, entries: Any, source: str, *, from_project: bool = False) -> list[HookConfig]:
    where = f"{source}: hooks.{event}"
    if event not in EVENTS:
        raise ConfigError(f"{source}: unknown hook event 'hooks.{event}'", hint=f"Hook events: {', '.join(EVENTS)}.")
    if not isinstance(entries, list):
        raise ConfigError(f"{where} must be a list of tables: write each hook as [[hooks.{event}]]")
    hooks = []
    for index, table in enumerate(entries):
        at = f"{where}[{index}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{at} must be a table with a `command`")
        unknown = sorted(set(table) - KEYS)
        if unknown:
            raise ConfigError(f"{at}: unknown key '{unknown[0]}'", hint="Known keys: command, matcher, timeout, env.")
        command = table.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ConfigError(f"{at}.command must be a non-empty string (a shell command line)")
        matcher = table.get("matcher", "")
        if not isinstance(matcher, str):
            raise ConfigError(f"{at}.matcher must be a string (a regular expression on tool names)")
        if event == "stop" and not every_tool(matcher):
            raise ConfigError(f"{at}.matcher: stop hooks have no tool to match; leave it out")
        if not every_tool(matcher):
            _check_matcher(matcher, at, command)
        timeout = table.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigError(f"{at}.timeout must be a positive number of seconds, got {timeout!r}")
        hooks.append(HookConfig(event, command, matcher, float(timeout), source,
                                _env_names(table.get("env", []), at, from_project)))
    return hooks


def _check_matcher(matcher: str, at: str, command: str) -> None:
    try:
        re.compile(matcher)
    except re.error as exc:
        glob = matcher.replace(".*", "*").replace("*", ".*")  # `*_file` written as a shell pattern
        maybe = f" (did you mean {glob!r}?)" if "*" in matcher and _compiles(glob) else ""
        raise ConfigError(f"{at}.matcher {matcher!r} of the hook `{inert(command, newlines=False)}` is not a valid regular expression: "
                          f"{exc}{maybe}",
                          hint="A matcher is a tool's exact name or a regular expression on the whole name "
                               "(`edit_file|write_file`, `docs__.*`); `*` or no matcher means every tool.") from None


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def _env_names(names: Any, at: str, from_project: bool) -> tuple[str, ...]:
    if names and from_project:
        raise ConfigError(f"{at}.env is not allowed in a project file",
                          hint="Which of your variables (tokens) a hook may see is yours to say: "
                               "declare the hook in your user config.")
    if not isinstance(names, list) or not all(isinstance(n, str) and ENV_NAME.fullmatch(n) for n in names):
        raise ConfigError(f"{at}.env must be a list of environment variable names, e.g. [\"GITHUB_TOKEN\"]")
    return tuple(dict.fromkeys(names))

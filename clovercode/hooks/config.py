"""``[[hooks.EVENT]]`` tables → HookConfig, checked when the config loads (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from clovercode.errors import ConfigError

EVENTS = ("pre_tool_use", "post_tool_use", "stop")
DEFAULT_TIMEOUT = 60.0
KEYS = {"command", "matcher", "timeout", "env"}
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class HookConfig:
    event: str  # one of EVENTS
    command: str  # a shell line, run with /bin/sh -c in the project directory
    matcher: str = ""  # regex on the tool name (full match); '' or '*' matches every tool
    timeout: float = DEFAULT_TIMEOUT
    source: str = ""
    env: tuple[str, ...] = ()  # variables passed from clovercode's environment beyond the sandbox's allowlist

    def matches(self, tool: str) -> bool:
        return self.matcher in ("", "*") or re.fullmatch(self.matcher, tool) is not None


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
        if event == "stop" and matcher:
            raise ConfigError(f"{at}.matcher: stop hooks have no tool to match; leave it out")
        try:
            re.compile(matcher)
        except re.error as exc:
            raise ConfigError(f"{at}.matcher is not a valid regular expression: {exc}") from None
        timeout = table.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigError(f"{at}.timeout must be a positive number of seconds, got {timeout!r}")
        hooks.append(HookConfig(event, command, matcher, float(timeout), source,
                                _env_names(table.get("env", []), at, from_project)))
    return hooks


def _env_names(names: Any, at: str, from_project: bool) -> tuple[str, ...]:
    if names and from_project:
        raise ConfigError(f"{at}.env is not allowed in a project file",
                          hint="Which of your variables (tokens) a hook may see is yours to say: "
                               "declare the hook in your user config.")
    if not isinstance(names, list) or not all(isinstance(n, str) and ENV_NAME.fullmatch(n) for n in names):
        raise ConfigError(f"{at}.env must be a list of environment variable names, e.g. [\"GITHUB_TOKEN\"]")
    return tuple(dict.fromkeys(names))

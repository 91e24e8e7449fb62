"""``[mcp_servers.NAME]`` tables → ServerConfig, checked when the config loads (pure; no SDK import)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from clovercode.ground.errors import ConfigError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
SEPARATOR = "__"  # tool names the model sees: SERVER__TOOL
STDIO_KEYS = {"command", "args", "env", "env_vars", "cwd"}
HTTP_KEYS = {"url", "headers"}
COMMON_KEYS = {"enabled", "timeout", "startup_timeout", "auto_approve"}
SECRET_KEYS = ("env", "env_vars", "headers")  # never from a project file
DEFAULT_TIMEOUT = 60.0
DEFAULT_STARTUP_TIMEOUT = 15.0


@dataclass(frozen=True)
class ServerConfig:
    name: str
    source: str  # the file that declared it
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    env_vars: tuple[str, ...] = ()  # names passed through from clovercode's own environment
    cwd: str = ""
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    timeout: float = DEFAULT_TIMEOUT  # seconds one tool call may take
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    auto_approve: tuple[str, ...] = ()  # tools called without asking (user config only)

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    def describe(self) -> str:
        if self.url:
            return self.url
        return " ".join([self.command, *self.args])


def parse_server(name: str, table: Any, source: str, *, from_project: bool) -> ServerConfig:
    where = f"{source}: mcp_servers.{name}"
    if not NAME.fullmatch(name) or SEPARATOR in name:
        raise ConfigError(f"{where}: server names use letters, digits, '-' and single '_' (tools are named {name}__TOOL)")
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table with `command` (stdio) or `url` (streamable HTTP)")
    unknown = sorted(set(table) - STDIO_KEYS - HTTP_KEYS - COMMON_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key '{unknown[0]}'",
                          hint="Known keys: " + ", ".join(sorted(STDIO_KEYS | HTTP_KEYS | COMMON_KEYS)) + ".")
    if from_project:
        for key in (*SECRET_KEYS, "auto_approve"):
            if key in table:
                raise ConfigError(f"{where}: '{key}' is not allowed in a project file",
                                  hint="Secrets and approvals are yours: declare them in your user config "
                                  "(a server there with the same name wins).")
    has_command, has_url = "command" in table, "url" in table
    if has_command == has_url:
        raise ConfigError(f"{where} needs exactly one of `command` (a stdio server) or `url` (streamable HTTP)")
    if has_url and set(table) & STDIO_KEYS:
        raise ConfigError(f"{where}: `{sorted(set(table) & STDIO_KEYS)[0]}` belongs to stdio servers, not to `url` ones")
    if has_command and set(table) & HTTP_KEYS - {"url"}:
        raise ConfigError(f"{where}: `headers` belongs to `url` servers, not to stdio ones")
    return ServerConfig(
        name=name, source=source,
        command=_string(table, "command", where), args=tuple(_strings(table, "args", where)),
        env=_string_map(table, "env", where), env_vars=tuple(_strings(table, "env_vars", where)),
        cwd=_string(table, "cwd", where), url=_url(table, where), headers=_string_map(table, "headers", where),
        enabled=_bool(table, "enabled", where, True),
        timeout=_seconds(table, "timeout", where, DEFAULT_TIMEOUT),
        startup_timeout=_seconds(table, "startup_timeout", where, DEFAULT_STARTUP_TIMEOUT),
        auto_approve=tuple(_strings(table, "auto_approve", where)),
    )


def _string(table: dict, key: str, where: str) -> str:
    value = table.get(key, "")
    if not isinstance(value, str) or (key in table and not value.strip()):
        raise ConfigError(f"{where}.{key} must be a non-empty string, got {value!r}")
    return value


def _url(table: dict, where: str) -> str:
    url = _string(table, "url", where)
    if url and not re.match(r"https?://", url):
        raise ConfigError(f"{where}.url must start with http:// or https://, got {url!r}")
    return url


def _strings(table: dict, key: str, where: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}.{key} must be a list of strings, got {value!r}")
    return value


def _string_map(table: dict, key: str, where: str) -> dict[str, str]:
    value = table.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}.{key} must be a table of strings, e.g. {key} = {{ NAME = \"value\" }}")
    return dict(value)


def _bool(table: dict, key: str, where: str, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key} must be true or false, got {value!r}")
    return value


def _seconds(table: dict, key: str, where: str, default: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{where}.{key} must be a positive number of seconds, got {value!r}")
    return float(value)

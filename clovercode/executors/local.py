"""Unsandboxed executor (``--sandbox none``): a plain subprocess with timeout and output cap."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from clovercode.executors.base import CommandResult
from clovercode.executors.capture import run_captured


def shell_argv(command: str | Sequence[str]) -> list[str]:
    return ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)


class LocalExecutor:
    name = "none"

    def __init__(self, output_limit: int = 30000):
        self.output_limit = output_limit

    def run(self, command: str | Sequence[str], cwd: Path, timeout: float,
            env: Mapping[str, str] | None = None) -> CommandResult:
        code, out, timed_out, omitted, seconds = run_captured(shell_argv(command), cwd, timeout, env, self.output_limit)
        return CommandResult(code, out, timed_out, omitted, seconds)

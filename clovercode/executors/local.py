"""Unsandboxed executor (``--sandbox none``): a plain subprocess with timeout and output cap."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from clovercode.executors.base import CommandResult, StopSignal
from clovercode.executors.capture import OnOutput, run_captured


def shell_argv(command: str | Sequence[str]) -> list[str]:
    return ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)


class LocalExecutor:
    name = "none"

    def __init__(self, output_limit: int = 30000, stop: StopSignal | None = None):
        self.output_limit, self.stop = output_limit, stop

    def with_stop(self, stop: StopSignal) -> "LocalExecutor":
        """A copy whose commands are killed once ``stop`` is set (executors/base.py ``with_stop``)."""
        return LocalExecutor(self.output_limit, stop)

    def run(self, command: str | Sequence[str], cwd: Path, timeout: float,
            env: Mapping[str, str] | None = None, on_output: OnOutput | None = None) -> CommandResult:
        # Like the sandbox (sandbox/environment.toml): Python neither reads nor writes __pycache__ in
        # the project, so a same-second, same-size edit is never hidden by stale bytecode and the
        # user's tree gets no new bytecode. The prefix is an empty directory of this command only.
        with tempfile.TemporaryDirectory(prefix="clovercode-pycache-") as prefix:
            env = {**(os.environ if env is None else env), **fresh_bytecode_env(prefix)}
            code, out, timed_out, omitted, seconds = run_captured(shell_argv(command), cwd, timeout, env, self.output_limit,
                                                             on_output=on_output, stop=self.stop)
        return CommandResult(code, out, timed_out, omitted, seconds)


def fresh_bytecode_env(prefix: str) -> dict[str, str]:
    """Environment that makes Python compile every module from its current source (``prefix``: an empty dir)."""
    return {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": prefix}

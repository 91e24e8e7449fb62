"""Choose the executor from the sandbox setting. Never a silent fallback to no sandbox."""

from __future__ import annotations

from clovercode.config import Config
from clovercode.errors import SandboxUnavailable
from clovercode.executors.base import Executor
from clovercode.executors.local import LocalExecutor

NO_SANDBOX_WARNING = ("WARNING: --sandbox none: commands the model writes run directly on this machine, "
                      "with your permissions, network and environment.")


def make_executor(cfg: Config) -> Executor:
    if cfg["sandbox"] == "none":
        return LocalExecutor(cfg["output_limit"])
    raise SandboxUnavailable(f"the '{cfg['sandbox']}' sandbox is not available in this build",
                             hint="Pass --sandbox none to run commands without a sandbox (not recommended).")

"""Choose the executor from the sandbox setting. Never a silent fallback to no sandbox."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping

from clovercode.ground.config import Config
from clovercode.executors.base import Executor
from clovercode.executors.local import LocalExecutor

NO_SANDBOX_WARNING = ("WARNING: --sandbox none: commands the model writes run directly on this machine, "
                      "with your permissions, network and environment.")


def make_executor(cfg: Config, root: Path | None = None, *, env: Mapping[str, str] | None = None,
                  warn: Callable[[str], None] | None = None, preflight: bool = True) -> Executor:
    """The executor for ``cfg["sandbox"]``; raises SandboxUnavailable when the sandbox cannot start.

    ``none`` is only ever chosen explicitly, and ``warn`` is told so loudly.
    """
    if cfg["sandbox"] == "none":
        if warn is not None:
            warn(NO_SANDBOX_WARNING)
        return LocalExecutor(cfg["output_limit"])
    from clovercode.executors.bwrap import BwrapExecutor
    from clovercode.sandboxing.ownpaths import policy_for

    host_env = dict(os.environ if env is None else env)
    project = root or Path.cwd()
    executor = BwrapExecutor(policy_for(cfg["sandbox"], cfg, host_env, project), project, host_env, cfg["output_limit"])
    if preflight:
        executor.preflight()
    return executor

"""Where ``fix --attempts N`` writes its trajectories: the run's own events file ``RUN.jsonl``
(``attempt_started``, ``attempt_completed``, ``fix_result``) and, nested under it, one trajectory per
attempt, ``RUN/RUN.attempt-K.jsonl`` (its subagents' under ``RUN/subagents/``). The readers of
trajectories (replay, ``trajectory to-replay``, ``sessions``, ``--resume``) find attempts through
these names, so a run's directory can be moved or copied whole."""

from __future__ import annotations

import json
from pathlib import Path

RUN_PREFIX = "fix-attempts-"
ATTEMPT_INFIX = ".attempt-"
# The per-attempt trajectories below a run's directory, for a glob from the trajectory directory.
NESTED_GLOB = f"{RUN_PREFIX}*/*{ATTEMPT_INFIX}*.jsonl"


def attempt_trajectory(run_log: Path, k: int) -> Path:
    """Attempt ``k``'s trajectory under the run whose events file is ``run_log``."""
    return run_log.with_suffix("") / f"{run_log.stem}{ATTEMPT_INFIX}{k}.jsonl"


def published_attempt(path: Path, k: int | None = None) -> Path | None:
    """For a run's events file: attempt ``k``'s trajectory, or without ``k`` the chosen attempt's
    (attempt 1's when none was chosen); None for any other file. Only the file's own directory is
    looked in: the absolute paths the events carry are where the run was, not where it is now."""
    if not path.name.startswith(RUN_PREFIX) or ATTEMPT_INFIX in path.name:  # an attempt's own is no run's
        return None
    chosen = None
    try:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict) and event.get("kind") == "fix_result" and type(event.get("chosen")) is int:
                    chosen = event["chosen"]
    except (OSError, UnicodeDecodeError):
        return None
    nested = attempt_trajectory(path, k or chosen or 1)
    return nested if nested.is_file() else None

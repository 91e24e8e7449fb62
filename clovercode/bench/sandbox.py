"""``clovercode bench sandbox``: start overhead of a command in bubblewrap vs a plain subprocess,
measured side by side (interleaved) in one run and reported as a ratio."""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from clovercode.executors.base import Executor


@dataclass(frozen=True)
class Row:
    command: str
    plain_ms: float
    sandboxed_ms: float

    @property
    def ratio(self) -> float:
        return self.sandboxed_ms / self.plain_ms if self.plain_ms else float("inf")


def _time_ms(executor: Executor, command: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    result = executor.run(command, cwd, 30)
    if result.exit_code != 0:
        raise RuntimeError(f"benchmark command failed in {executor.name}: {result.output[-300:]}")
    return (time.perf_counter() - started) * 1000


def measure(policy_name: str = "workspace-write", runs: int = 30) -> list[Row]:
    from clovercode.executors.bwrap import BwrapExecutor
    from clovercode.executors.local import LocalExecutor
    from clovercode.sandboxing.policy import load_policy

    scratch = Path(tempfile.mkdtemp(prefix="clovercode-bench-"))
    try:
        (scratch / ".git").mkdir()
        plain = LocalExecutor()
        sandboxed = BwrapExecutor(load_policy(policy_name), scratch, dict(os.environ))
        rows = []
        for label, command in (("/bin/true", ["/bin/true"]), ("python -c pass", [sys.executable, "-c", "pass"])):
            plain_times, sandboxed_times = [], []
            for _ in range(runs):  # interleaved, so load on the machine hits both sides alike
                plain_times.append(_time_ms(plain, command, scratch))
                sandboxed_times.append(_time_ms(sandboxed, command, scratch))
            rows.append(Row(label, statistics.median(plain_times), statistics.median(sandboxed_times)))
        return rows
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def report(rows: list[Row], policy_name: str, runs: int) -> str:
    lines = [f"sandbox start overhead (policy {policy_name}; median of {runs} runs each, interleaved)",
             f"{'command':<16} {'plain ms':>9} {'bwrap ms':>9} {'ratio':>7} {'added ms':>9}"]
    for row in rows:
        lines.append(f"{row.command:<16} {row.plain_ms:>9.2f} {row.sandboxed_ms:>9.2f} {row.ratio:>6.2f}x "
                     f"{row.sandboxed_ms - row.plain_ms:>9.2f}")
    return "\n".join(lines)

"""``clovercode fix``: one unattended run of the loop, a summary, and an exit code."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from clovercode.agent.budget import StopReason
from clovercode.agent.loop import RunResult
from clovercode.config import Config
from clovercode.errors import ExitCode
from clovercode.executors.select import NO_SANDBOX_WARNING
from clovercode.session import open_session
from clovercode.ui.render import ConsoleRenderer


@dataclass
class FixOutcome:
    result: RunResult
    exit_code: ExitCode
    trajectory: Path | None

    @property
    def status(self) -> str:
        return {ExitCode.OK: "fixed", ExitCode.NO_CHANGE: "no_change", ExitCode.GAVE_UP: "gave_up",
                ExitCode.INTERRUPTED: "interrupted", ExitCode.MODEL_UNAVAILABLE: "model_error",
                ExitCode.TESTS_FAILED: "tests_failed"}.get(self.exit_code, "error")

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "exit_code": int(self.exit_code), **self.result.to_json(),
                "trajectory": str(self.trajectory) if self.trajectory else None}


def exit_code_for(result: RunResult) -> ExitCode:
    if result.stop is StopReason.FINISHED:
        return ExitCode.OK if result.changed else ExitCode.NO_CHANGE
    if result.stop is StopReason.INTERRUPTED:
        return ExitCode.INTERRUPTED
    if result.stop is StopReason.MODEL_ERROR:
        return ExitCode.MODEL_UNAVAILABLE
    return ExitCode.GAVE_UP


def run_fix(root: Path, cfg: Config, issue: str, console: Console) -> FixOutcome:
    cfg = cfg.with_overrides({"approval": "full-auto"}, "fix (always full-auto)")
    if cfg["sandbox"] == "none":
        console.print(f"[bold red]{NO_SANDBOX_WARNING}[/]", highlight=False, soft_wrap=True)
    session = open_session(root, cfg, interactive=False)
    try:
        result = session.run_task(issue, ConsoleRenderer(console))
    finally:
        session.close()
    outcome = FixOutcome(result, exit_code_for(result), session.last_trajectory)
    print_summary(console, outcome)
    return outcome


def print_summary(console: Console, outcome: FixOutcome) -> None:
    result = outcome.result
    console.print()
    console.print(f"[bold]Result:[/] {outcome.status} — {result.detail}", highlight=False, soft_wrap=True)
    console.print(f"[bold]Steps:[/] {result.steps} · tokens {result.prompt_tokens} in / {result.completion_tokens} out"
                  f" · {result.seconds:.1f}s", highlight=False, soft_wrap=True)
    if result.changed:
        console.print("[bold]Changed:[/] " + ", ".join(result.changed), highlight=False, soft_wrap=True)
    else:
        console.print("[bold]Changed:[/] nothing", highlight=False, soft_wrap=True)
    if result.summary:
        console.print(f"[bold]Summary:[/] {result.summary}", highlight=False, soft_wrap=True)
    if outcome.trajectory:
        console.print(f"[dim]Trajectory: {outcome.trajectory}[/]", highlight=False, soft_wrap=True)

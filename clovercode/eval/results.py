"""The results file: one JSON document with the settings, the machine, every attempt with its
trajectory, and the metrics over the whole suite and per task. Written atomically, also mid-run."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clovercode import __version__
from clovercode.actions.fileio import write_atomic
from clovercode.ground.errors import UsageError
from clovercode.eval.metrics import best_of_n, counted, summarize
from clovercode.eval.tasks import Suite

FORMAT = "clovercode-eval/1"
# Settings that change what a run does; recorded so two result files can be compared fairly.
RECORDED_SETTINGS = ("model", "endpoint", "temperature", "top_p", "max_new_tokens", "thinking", "max_steps",
                     "max_time", "max_tokens", "max_format_errors", "max_repeats", "repetition_window", "command_timeout",
                     "sandbox")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def describe_machine() -> dict[str, Any]:
    """Enough to tell two machines apart in a comparison; no heavy imports (no torch)."""
    gpus: list[str] = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
            gpus = [line.strip() for line in out.splitlines() if line.strip()]
        except (OSError, subprocess.SubprocessError):
            pass
    return {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "gpus": gpus, "clovercode": __version__}


@dataclass
class EvalRecord:
    suite: Suite
    model: str
    repeats: int
    settings: dict[str, Any]
    machine: dict[str, Any] = field(default_factory=describe_machine)
    started_at: str = field(default_factory=now)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    finished_at: str | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # task id -> why it did not run
    best_of: int | None = None  # `eval --attempts N`: N (the repeats are attempts, one is chosen per task)

    def to_json(self) -> dict[str, Any]:
        done = {a["task"] for a in self.attempts}
        chosen = best_of_n(counted(self.attempts))
        tasks = []
        for task in self.suite.tasks:
            if task.id not in done:
                continue
            mine = [a for a in self.attempts if a["task"] == task.id]
            tasks.append({"id": task.id, "title": task.title, "language": task.language, "kind": task.kind,
                          "metrics": summarize(mine, self.repeats), "attempts": mine}
                         | ({"best_of_n": chosen[task.id]} if task.id in chosen else {}))
        return {
            "format": FORMAT, "suite": {"name": self.suite.name, "source": self.suite.source, "tasks": len(self.suite.tasks)},
            "model": self.model, "repeats": self.repeats, "best_of": self.best_of, "settings": self.settings, "machine": self.machine,
            "started_at": self.started_at, "finished_at": self.finished_at,
            "complete": not self.interrupted and len(self.attempts) == len(self.suite.tasks) * self.repeats,
            "interrupted": self.interrupted, "skipped": self.skipped,
            "summary": summarize(self.attempts, self.repeats), "tasks": tasks,
        }


def write_results(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, (json.dumps(data, ensure_ascii=False, indent=1) + "\n").encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot write results to {path}: {exc.strerror or exc}") from None


def load_results(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"results file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{path} is not a clovercode eval results file (format {FORMAT!r})",
                         hint="Results files are written by `clovercode eval --json OUT`.")
    return data

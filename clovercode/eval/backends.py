"""Which model answers each attempt: one backend shared by the whole suite (a model loads once), or
a directory of replay recordings, one per task (``--model replay:DIR``)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence

from clovercode.backends.base import ModelBackend
from clovercode.backends.registry import REPLAY_PREFIX, open_backend, replay_path
from clovercode.ground.config import Config
from clovercode.ground.errors import UsageError
from clovercode.eval.tasks import Task


class BackendProvider(Protocol):
    name: str

    def prepare(self, tasks: Sequence[Task], repeats: int) -> None:
        """Fail now, before any task runs, if a backend cannot be had."""
        ...

    def backend_for(self, task: Task, repeat: int) -> ModelBackend:
        ...

    def done_with(self, backend: ModelBackend) -> None:
        ...

    def close(self) -> None:
        ...


class SharedBackend:
    """The configured model (embedded engine, endpoint, replay file), opened once on first use."""

    def __init__(self, cfg: Config, base_dir: Path):
        self.cfg, self.base_dir = cfg, base_dir
        self.backend: ModelBackend | None = None
        self.name = cfg["endpoint"] or cfg["model"]

    def prepare(self, tasks: Sequence[Task], repeats: int) -> None:
        # Opened before the progress display starts: loading a model shows its own progress.
        if tasks:
            self.backend_for(tasks[0], 1)

    def backend_for(self, task: Task, repeat: int) -> ModelBackend:
        if self.backend is None:
            self.backend = open_backend(self.cfg, base_dir=self.base_dir)
            self.name = self.backend.name
        return self.backend

    def done_with(self, backend: ModelBackend) -> None:
        pass  # kept for the next task: a model loads once per suite

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()
            self.backend = None


class ReplayDirectory:
    """``DIR/<task>.r<repeat>.jsonl`` if present, else ``DIR/<task>.jsonl`` (the same run every repeat)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.name = f"replay:{directory}"

    def recording(self, task_id: str, repeat: int) -> Path | None:
        for candidate in (self.directory / f"{task_id}.r{repeat}.jsonl", self.directory / f"{task_id}.jsonl"):
            if candidate.is_file():
                return candidate
        return None

    def prepare(self, tasks: Sequence[Task], repeats: int) -> None:
        """Refuse to start when a recording is missing, rather than failing halfway through the suite."""
        missing = sorted({t.id for t in tasks for r in range(1, repeats + 1) if self.recording(t.id, r) is None})
        if missing:
            raise UsageError(f"{self.directory} has no recording for task {', '.join(missing)}",
                             hint="A replay directory holds <task>.jsonl (or <task>.r<N>.jsonl per repeat); "
                                  "choose tasks with --task, or record them first.")

    def backend_for(self, task: Task, repeat: int) -> ModelBackend:
        from clovercode.backends.replay import ReplayBackend

        path = self.recording(task.id, repeat)
        if path is None:
            raise UsageError(f"{self.directory} has no recording for task {task.id}")
        return ReplayBackend(path)

    def done_with(self, backend: ModelBackend) -> None:
        backend.close()

    def close(self) -> None:
        pass


def provider_for(cfg: Config, cwd: Path) -> BackendProvider:
    spec: str = cfg["model"]
    if not cfg["endpoint"] and spec.startswith(REPLAY_PREFIX):
        path = replay_path(spec, cwd)
        if path.is_dir():
            return ReplayDirectory(path)
    return SharedBackend(cfg, cwd)

"""The executor seam: run a command, get back an exit code and capped output, never hang."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class CommandResult:
    exit_code: int | None  # None when killed by the timeout
    output: str  # stdout and stderr interleaved, capped (head + tail)
    timed_out: bool = False
    omitted_bytes: int = 0  # bytes cut from the middle of the output
    seconds: float = 0.0

    def describe(self) -> str:
        """The observation text the model reads."""
        if self.timed_out:
            head = f"Command timed out after {self.seconds:.0f}s; its processes were killed."
        else:
            head = f"Exit code: {self.exit_code}"
        body = self.output if self.output.strip() else "(no output)"
        return f"{head}\n{body}"


@runtime_checkable
class Executor(Protocol):
    """Runs ``command`` (a shell string or an argv) in ``cwd``; kills the whole tree at ``timeout``."""

    name: str

    def run(self, command: str | Sequence[str], cwd: Path, timeout: float,
            env: Mapping[str, str] | None = None, on_output: Callable[[bytes], None] | None = None) -> CommandResult:
        """``on_output``: each chunk of output as the command writes it (an editor shows it live)."""
        ...


class CommandStopped(KeyboardInterrupt):
    """The command was killed (its whole process group, the sandbox with it) because the work it ran
    for was stopped from another thread: a subagent whose parent was interrupted or ran out of time."""


class StopSignal(Protocol):
    def is_set(self) -> bool: ...


def with_stop(executor: Any, stop: StopSignal) -> Any:
    """``executor``, whose commands are killed within a fraction of a second once ``stop`` is set
    (:class:`CommandStopped` is raised where ``run`` was called). An executor that cannot be stopped
    this way (a test double) is returned as it is."""
    extend = getattr(executor, "with_stop", None)
    return extend(stop) if callable(extend) else executor


def with_writable(executor: Any, paths: Sequence[Path]) -> Any:
    """``executor``, able to write ``paths`` too (a scratch directory outside the project).

    Executors that confine writes offer ``with_writable``; one that does not confine them (the
    unsandboxed one, a test double) already can, and is returned as it is.
    """
    extend = getattr(executor, "with_writable", None)
    return extend(paths) if callable(extend) else executor


def with_readable(executor: Any, paths: Sequence[Path]) -> Any:
    """``executor``, showing ``paths`` (directories outside the project) read-only. One that hides
    nothing (the unsandboxed one, a test double) is returned as it is."""
    extend = getattr(executor, "with_readable", None)
    return extend(paths) if callable(extend) else executor


def with_project_read_only(executor: Any) -> Any:
    """``executor``, unable to write the project, where it can confine writes at all (the unsandboxed
    one and test doubles cannot, and are returned as they are)."""
    confine = getattr(executor, "with_project_read_only", None)
    return confine() if callable(confine) else executor

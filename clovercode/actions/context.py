"""What a tool handler may touch: the project root, the executor, approvals and per-run records."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from clovercode.actions.toolerror import ToolError  # noqa: F401  (its callers import it from here)
from clovercode.executors.base import Executor

if TYPE_CHECKING:
    from clovercode.actions.bytecode import BytecodeGuard
    from clovercode.actions.fileio import FileAccess
    from clovercode.actions.guards import FileGuard, FileStamps
    from clovercode.trust.projectview import ProjectView


@dataclass(frozen=True)
class Observation:
    ok: bool
    text: str  # what the model reads
    data: dict[str, Any] = field(default_factory=dict)  # for the UI and trajectory (e.g. a diff)


@dataclass(frozen=True)
class FileChange:
    """One file of an edit awaiting approval, whole: what a person may read before answering."""

    path: str  # project-relative, as shown
    old: str | None  # None: the file is created
    new: str | None  # None: the file is deleted


@dataclass(frozen=True)
class ApprovalRequest:
    kind: str  # "edit" | "command" | "mcp"
    title: str  # e.g. "edit src/app.py", the command line, or "SERVER: TOOL"
    detail: str = ""  # the diff, the sandbox the command runs in, or an MCP call's arguments
    rule: str = ""  # what "always" remembers, when narrower than the kind (an MCP call: that one tool)
    changes: tuple[FileChange, ...] = ()  # an edit's files, old and new text in full


Approver = Callable[[ApprovalRequest], bool]
# Called before the first change of a run; returns a warning for the model when no checkpoint
# could be recorded (the change still happens), else None.
Checkpoint = Callable[[], "str | None"]


def approve_all(request: ApprovalRequest) -> bool:
    return True


def no_events(kind: str, **data: Any) -> None:
    return None


def no_checkpoint() -> str | None:
    return None


def _default_guard() -> "FileGuard":
    from clovercode.actions.guards import FileGuard

    return FileGuard.from_policy_data()


def _disk_files() -> "FileAccess":
    from clovercode.actions.fileio import DiskFiles

    return DiskFiles()


def _new_stamps() -> "FileStamps":
    from clovercode.actions.guards import FileStamps

    return FileStamps()


@dataclass
class ToolContext:
    root: Path
    executor: Executor
    command_timeout: float = 120.0
    command_env: Mapping[str, str] | None = None
    approve: Approver = approve_all
    changed: set[str] = field(default_factory=set)  # project-relative paths changed this run
    checkpoint: Checkpoint = no_checkpoint
    stamps: "FileStamps" = field(default_factory=_new_stamps)  # read-before-edit records
    guard: "FileGuard" = field(default_factory=_default_guard)
    bytecode: "BytecodeGuard | None" = None  # the user's __pycache__ for changed sources (made from root)
    files: "FileAccess" = field(default_factory=_disk_files)  # disk, or an editor's buffers (ACP)
    output: "Callable[[bytes], None] | None" = None  # a command's output as it comes (an editor shows it live)
    # The run's event stream, for what a tool has to show besides its observation (update_plan's plan).
    emit: Callable[..., None] = no_events
    # What is left of the running agent's limits, and where work a tool starts is charged (subagents'
    # tokens): agent/loop.py's RunBudget, set for each run; None outside a run.
    budget: Any = None

    view: "ProjectView" = None  # type: ignore[assignment]  # the one way to the project's files (made from root and guard)

    def __post_init__(self) -> None:
        if self.view is None:
            from clovercode.trust.projectview import ProjectView

            self.view = ProjectView(self.root, self.guard.secrets)
        bind = getattr(self.files, "bind", None)
        if bind is not None:
            bind(self.view)  # a DiskFiles made without a root reaches the disk through this view
        if self.bytecode is None:
            from clovercode.actions.bytecode import BytecodeGuard

            self.bytecode = BytecodeGuard(self.root, self.view)

"""What a child may do: never more than its parent.

Read-only by default (view, list, search, and commands in a read-only sandbox); write rights only
when asked for, only where the parent's approval mode lets edits happen at all, and only inside the
child's declared ``paths``, which the file guard (the seam every file change passes) enforces. Two
children of one turn that would write the same file are refused before either starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from clovercode.actions.context import ToolError
from clovercode.actions.guards import FileGuard
from clovercode.executors.base import Executor
from clovercode.trust.paths import inside_project

READ_TOOLS = ("view_file", "list_files", "search_text")
COMMAND_TOOL = "run_command"
WRITE_TOOLS = ("edit_file", "write_file", "apply_patch")
OTHER_TOOLS = ("update_plan",)
TASK_TOOL = "task"
KNOWN = frozenset((*READ_TOOLS, COMMAND_TOOL, *WRITE_TOOLS, *OTHER_TOOLS, TASK_TOOL))


@dataclass(frozen=True)
class ScopedGuard(FileGuard):
    """The parent's guard, and writes only beneath ``scope`` (resolved absolute paths; empty: none)."""

    scope: tuple[str, ...] = ()

    def check_write(self, root: Path, path: Path, shown: str) -> None:
        text = str(path)
        if not any(text == entry or text.startswith(entry.rstrip("/") + "/") for entry in self.scope):
            allowed = ", ".join(_shown(root, entry) for entry in self.scope) or "nothing"
            raise ToolError(f"'{shown}' is outside this subagent's paths ({allowed}): a subagent writes only "
                            "inside the paths its task declared. Report the change that is needed instead.")
        super().check_write(root, path, shown)


def _shown(root: Path, entry: str) -> str:
    try:
        return Path(entry).relative_to(root.resolve()).as_posix() or "."
    except ValueError:
        return entry


def scoped_guard(parent: FileGuard, scope: Iterable[Path]) -> ScopedGuard:
    base = {f.name: getattr(parent, f.name) for f in dataclasses.fields(FileGuard)}
    return ScopedGuard(**base, scope=tuple(str(p) for p in scope))


def resolve_paths(root: Path, paths: Sequence[str]) -> list[Path]:
    """Each declared path resolved inside the project; a ToolError names the first that is not."""
    resolved = []
    for given in paths:
        where = inside_project(root, given.strip())
        if where is None:
            raise ToolError(f"paths: '{given}' is not inside the project; a subagent works only in the project.")
        resolved.append(where)
    return resolved


def overlapping(a: Sequence[Path], b: Sequence[Path]) -> Path | None:
    """A path both scopes could write (one equal to or beneath the other), else None."""
    for x in a:
        for y in b:
            if x == y or x in y.parents:
                return y
            if y in x.parents:
                return x
    return None


def child_tools(requested: Sequence[str] | None, write: bool, can_run: bool, depth_left: int) -> list[str]:
    """The tool names a child gets: its profile's list (or the read-only set), narrowed to what
    its rights allow; unknown names (another server's tools) are left out."""
    wanted = list(requested) if requested is not None else [*READ_TOOLS, COMMAND_TOOL, TASK_TOOL]
    if write:
        wanted += [t for t in WRITE_TOOLS if requested is None or t in requested]
    out = []
    for name in dict.fromkeys(wanted):
        if name not in KNOWN or (name in WRITE_TOOLS and not write) or (name == COMMAND_TOOL and not can_run):
            continue
        if name == TASK_TOOL and depth_left <= 0:
            continue
        out.append(name)
    return out


def read_only_executor(executor: Executor) -> Executor | None:
    """The parent's sandbox with the project read-only (network as the parent's, never more); None
    when commands run unsandboxed (--sandbox none): nothing could keep a child's command read-only."""
    policy = getattr(executor, "policy", None)
    with_policy = getattr(executor, "with_policy", None)
    if policy is None or with_policy is None:
        return None
    if not policy.project_writable:
        return executor
    return with_policy(dataclasses.replace(policy, project_writable=False, name=f"{policy.name}, project read-only"))


def writes_allowed(approve: Any, guard: FileGuard, scope: Sequence[Path]) -> str | None:
    """Why a child may not write ``scope``: the parent's approval mode allows no writes (plan mode, an
    editor's read-only mode), or
    the parent is itself a subagent that may write none or only less; else None."""
    mode = getattr(approve, "mode", None)
    if mode == "plan":
        return "plan mode: nothing may change yet, so no subagent may write"
    if mode == "read-only":  # an editor's read-only mode (front/acp/modes.py): nothing may change
        return "read-only mode: nothing may change, so no subagent may write"
    if isinstance(guard, ScopedGuard):  # a nested child: never more than the subagent that starts it
        outer = [Path(entry) for entry in guard.scope]
        beyond = [p for p in scope if not any(p == o or o in p.parents for o in outer)]
        if not outer or beyond:
            return ("the subagent starting it may not write there" if outer
                    else "the subagent starting it may only read")
    return None

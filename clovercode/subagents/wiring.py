"""The session's built-in tools with the task tool wired to this run (or left out when subagents are off)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clovercode.actions.context import ToolContext
from clovercode.actions.toolbox import HANDLERS, Handler, ToolHooks
from clovercode.agent.budget import Limits
from clovercode.backends.base import GenerationParams
from clovercode.subagents.child import Parent
from clovercode.subagents.profiles import AgentProfile, load_profiles
from clovercode.subagents.rights import TASK_TOOL, read_only_executor
from clovercode.subagents.tool import TaskTool
from clovercode.toolcalls.schemas import ToolSpec, load_tool_specs


def session_agents(root: Path, cfg: Any, env: Any, notes: list[tuple[str, str]]) -> dict[str, AgentProfile]:
    """The named subagents of a session; what could not be used becomes a start-up note."""
    said: list[str] = []
    found = load_profiles(root, env, getattr(cfg, "project_trusted", False), said)
    notes.extend(("startup", note) for note in said)
    return found


def builtin_tools(session: Any, ctx: ToolContext, hooks: ToolHooks | None, trajectory: Path,
                  params: GenerationParams) -> tuple[list[ToolSpec], dict[str, Handler]]:
    cfg = session.cfg
    specs = load_tool_specs()
    if not cfg["subagents.enabled"]:
        return [s for s in specs if s.name != TASK_TOOL], dict(HANDLERS)
    if session.agents is None:
        session.agents = session_agents(session.root, cfg, session.env, session.notices)
    parent = Parent(session.root, cfg, session.env, read_only_executor(ctx.executor), ctx.approve, ctx.checkpoint,
                    ctx.guard, ctx.files, ctx.command_env, hooks, params, trajectory.parent, trajectory.stem)
    tool = TaskTool(parent, session.backend, session.agents, Limits.from_config(cfg))
    return specs, {**HANDLERS, TASK_TOOL: tool}

"""Wiring: config → backend, executor, toolbox, prompt, sinks → an Agent. Used by fix and the REPL."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from clovercode.actions.context import Approver, ToolContext, approve_all, no_checkpoint
from clovercode.actions.fileio import DiskFiles, FileAccess
from clovercode.actions.guards import FileGuard, FileStamps
from clovercode.actions.toolbox import Handler, Toolbox
from clovercode.agent.budget import Limits
from clovercode.agent.events import EventSink, MultiSink
from clovercode.agent.loop import Agent
from clovercode.agent.prompts import Conversation
from clovercode.agent.trajectory import TrajectoryWriter, new_trajectory_path
from clovercode.backends.base import GenerationParams, ModelBackend
from clovercode.backends.registry import open_backend
from clovercode.ground.config import Config, state_dir, trajectory_dir  # noqa: F401 - trajectory_dir: its old home
from clovercode.context.assemble import ContextAssembler
from clovercode.context.grammars import map_missing, map_off_note
from clovercode.context.prompt import ContextPrompt
from clovercode.context.resume import SnapshotBeforeEnd
from clovercode.sandboxing.ownpaths import hidden_paths
from clovercode.executors.base import Executor
from clovercode.executors.select import make_executor
from clovercode.hooks.hooks import Hooks
from clovercode.mcpservers.manager import McpManager
from clovercode.toolcalls.schemas import ToolSpec
from clovercode.subagents.profiles import AgentProfile
from clovercode.subagents.wiring import builtin_tools
from clovercode.vcs.checkpoint import Checkpointer


def generation_params(cfg: Config, unattended: bool = False) -> GenerationParams:
    """Sampling settings for a turn. Runs nobody watches (fix, exec, eval) ask for ``tool_choice``
    (engine.tool_choice, "required" by default): a turn there must act, and the embedded engine then
    cannot emit an invalid call. The REPL leaves the model free."""
    choice = cfg["engine.tool_choice"] if unattended and cfg["engine.tool_choice"] != "off" else None
    return GenerationParams(max_new_tokens=cfg["max_new_tokens"], temperature=cfg["temperature"],
                            top_p=cfg["top_p"], thinking=cfg["thinking"], stop=("</tool_call>",),
                            tool_choice=choice, max_prose=cfg["engine.tool_prose"],
                            loop_window=cfg["repetition_window"])


@dataclass
class Session:
    """One project, one model, one conversation; runs tasks through the loop."""

    root: Path
    cfg: Config
    backend: ModelBackend
    executor: Executor
    interactive: bool
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    approve: Approver = approve_all
    conversation: Conversation = field(default_factory=Conversation)
    stamps: FileStamps = field(default_factory=FileStamps)  # what the model has viewed (read-before-edit)
    last_trajectory: Path | None = None
    last_context: ToolContext | None = None
    command_env: Mapping[str, str] | None = None  # environment of the model's commands (None: inherit)
    prompt: ContextPrompt | None = None  # the last task's prompt builder (for /compact and /context)
    mcp: McpManager | None = None  # the MCP servers of this session (a tool source), stopped by close()
    # start-up warnings as (category, text), said once (the REPL, or the first run): exec --json's warning categories
    notices: list[tuple[str, str]] = field(default_factory=list)
    session_id: str | None = None  # the first task's trajectory id; every later task's snapshot carries it
    unattended: bool = False  # nobody watches the run (fix, exec, eval): every turn must act (engine.tool_choice)
    ci_changes_allowed: bool = False  # fix --allow-ci-changes: CI definitions and hooks may change
    files: FileAccess = field(default_factory=DiskFiles)  # where file tools read and write (ACP: the editor's buffers)
    command_output: Callable[[bytes], None] | None = None  # commands' output as it comes (ACP streams it)
    next_trajectory: Path | None = None  # the next task's trajectory, when it had to be named before (an ACP session id)
    # a restricted toolbox (review: read-only tools, the tests, report_finding) instead of every built-in
    tools: "tuple[list[ToolSpec], dict[str, Handler]] | None" = None
    agents: "dict[str, AgentProfile] | None" = None  # named subagents (user's, trusted project's); loaded on first use
    seed: int | None = None  # the sampling seed of every turn (fix --attempts: each attempt its own); None: unseeded
    # undo checkpoints of the working tree before the first change of a task; off for a fix attempt's
    # temporary worktree: refs/clovercode/checkpoints is shared by every worktree, so its checkpoints
    # would sit in the user's undo list and `undo` would bring an attempt's tree into the user's checkout
    checkpoints: bool = True

    def allow_ci_changes(self) -> None:
        """Let commands and file tools change CI definitions and the tree's hooks (`fix --allow-ci-changes`)."""
        self.ci_changes_allowed = True
        policy = getattr(self.executor, "policy", None)
        if policy is not None and policy.runs_outside:
            self.executor = self.executor.with_policy(dataclasses.replace(policy, runs_outside=()))  # type: ignore[attr-defined]

    def run_task(self, task: str, sink: EventSink | None = None, *, follow_up: bool = False):
        """Run ``task``; ``follow_up=True`` continues the last task instead (same tool context and
        trajectory file; the message is tagged "feedback", e.g. test failures after finish)."""
        if follow_up and self.last_context is not None and self.last_trajectory is not None:
            ctx = self.last_context
        else:
            follow_up = False
            label = task.split("\n")[0]
            ctx = ToolContext(self.root, self.executor, self.cfg["command_timeout"], self.command_env, self.approve,
                              checkpoint=Checkpointer(self.root, self.env, label) if self.checkpoints else no_checkpoint,
                              stamps=self.stamps,
                              guard=FileGuard.from_policy_data(self.env, self.root,
                                                                allow_ci_changes=self.ci_changes_allowed,
                                                                extra=hidden_paths(self.cfg, self.env, self.root)),
                              files=self.files, output=self.command_output)
            self.last_trajectory = self.next_trajectory or new_trajectory_path(trajectory_dir(self.cfg, self.env), label)
            self.next_trajectory = None
            self.session_id = self.session_id or self.last_trajectory.stem
        self.last_context = ctx
        writer = TrajectoryWriter(self.last_trajectory)
        events = MultiSink(SnapshotBeforeEnd(writer, self.root, self.conversation, self.session_id), sink)  # what --resume loads
        ctx.emit = events.emit
        hooks = Hooks(self.cfg.declared.hooks, self.root, self.env, events, self.cfg["hooks.max_stop_blocks"])
        params = generation_params(self.cfg, self.unattended and getattr(self.backend, "constrains_output", False))
        if self.seed is not None:
            params = dataclasses.replace(params, seed=self.seed)
        specs, handlers = self.tools if self.tools is not None else builtin_tools(
            self, ctx, hooks if hooks else None, self.last_trajectory, generation_params(self.cfg))
        for category, notice in self.take_categorised():
            events.emit("warning", text=notice, category=category)
        toolbox = Toolbox(ctx, specs, handlers, sources=[self.mcp] if self.mcp else [], hooks=hooks if hooks else None)
        try:
            if follow_up and self.prompt is not None:  # same task: same map, same compaction state
                self.prompt.sink = events
            else:
                self.prompt = ContextAssembler(self.root, self.cfg, self.env, self.interactive).prompt_for(
                    self.conversation, task, toolbox.specs, self.backend, self.cfg["max_new_tokens"], events)
            # only a backend that can enforce tool_choice is asked to (the tiny test model refuses)
            agent = Agent(self.backend, toolbox, self.prompt, Limits.from_config(self.cfg), params,
                          events, interactive=self.interactive)
            return agent.run(self.conversation, task, tag="feedback" if follow_up else "goal")
        finally:
            writer.close()

    def take_notices(self) -> list[str]:
        return [text for _, text in self.take_categorised()]

    def take_categorised(self) -> list[tuple[str, str]]:
        notices, self.notices = self.notices, []  # the MCP servers' own notes come through the toolbox, each step
        return notices

    def close(self) -> None:
        try:
            if self.mcp is not None:
                self.mcp.close()
        finally:
            self.backend.close()


def open_session(root: Path, cfg: Config, *, interactive: bool, approve: Approver = approve_all,
                 env: Mapping[str, str] | None = None, backend: ModelBackend | None = None,
                 unattended: bool | None = None, mcp_wait: float | None = None) -> Session:
    """``backend``: an already open one to use (eval shares one model across many sessions);
    ``unattended``: nobody watches (default: not interactive; exec is interactive in its approvals
    but unattended); ``mcp_wait``: seconds to wait for MCP servers to start (None: until each is
    up or has failed; 0: not at all, the REPL: their tools join when ready)."""
    # `--sandbox none` is warned about by the caller (fix, REPL), next to its other output.
    executor = make_executor(cfg, root, env=env)
    backend = backend if backend is not None else open_backend(cfg, base_dir=root)
    session = Session(root.resolve(), cfg, backend, executor, interactive, dict(env or os.environ), approve)
    session.notices = [("startup", note) for note in cfg.declared.notes]
    if cfg["context.map_tokens"] > 0 and (missing := map_missing()):  # a core install: run without the map
        session.notices.append(("startup", map_off_note(missing)))
    session.unattended = not interactive if unattended is None else unattended
    if cfg.declared.mcp_servers:  # in the background: a slow server never holds up the first prompt
        session.mcp = McpManager(list(cfg.declared.mcp_servers.values()), session.root, session.env,
                                 state_dir(session.env) / "mcp-logs", cfg["output_limit"])
        session.mcp.start_background(announce=mcp_wait is not None)
        if mcp_wait is None or mcp_wait > 0:
            session.mcp.wait(mcp_wait)
    return session

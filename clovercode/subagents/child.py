"""One child: a fresh conversation through the same loop (agent/loop.py), with its own tools,
budget, trajectory and a bounded report for the parent."""

from __future__ import annotations

import dataclasses
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from clovercode.actions.context import ApprovalRequest, Observation, ToolContext
from clovercode.actions.guards import FileGuard, FileStamps
from clovercode.actions.toolbox import FINISH, HANDLERS, Handler, Toolbox, ToolHooks
from clovercode.agent.budget import Limits, StopReason
from clovercode.agent.events import MultiSink
from clovercode.agent.loop import Agent, RunResult
from clovercode.agent.prompts import Conversation
from clovercode.agent.trajectory import TrajectoryWriter
from clovercode.backends.base import GenerationParams
from clovercode.context.assemble import ContextAssembler
from clovercode.executors.base import Executor, with_stop
from clovercode.subagents.profiles import AgentProfile
from clovercode.subagents.rights import TASK_TOOL, scoped_guard
from clovercode.toolcalls.schemas import load_tool_specs

SUBAGENT_RULES = """
You are a subagent: another agent handed you one subtask and reads only your final report, not your
steps. Work on the subtask alone, within your tools. When you are done, or cannot go on, end with your
report: call finish with it as the summary, or answer in plain text. The report must stand on its own:
what you found or changed, with file paths and line numbers, and what is still open. Be concise.
"""


@dataclass
class Parent:
    """What every child of a session inherits: never more than this."""

    root: Path
    cfg: Any
    env: Mapping[str, str]
    executor: Executor | None  # commands in a read-only sandbox; None: the child runs no commands
    approve: Callable[[ApprovalRequest], bool]
    checkpoint: Callable[[], "str | None"]
    guard: FileGuard
    files: Any
    command_env: Mapping[str, str] | None
    hooks: ToolHooks | None
    params: GenerationParams
    trajectory_dir: Path
    parent_id: str
    depth: int = 1  # the depth a child of this parent runs at
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: Any = None  # a child's: its group's ChildStop (models.py), which its commands and children obey


@dataclass(frozen=True)
class ChildTask:
    number: int
    call_id: str
    description: str
    prompt: str
    profile: AgentProfile | None
    scope: tuple[Path, ...]
    write: bool
    tools: tuple[str, ...]
    limits: Limits
    shown_paths: tuple[str, ...] = ()  # the declared paths as the model wrote them

    @property
    def label(self) -> str:
        return self.description


@dataclass
class ChildOutcome:
    task: ChildTask
    child_id: str
    trajectory: Path
    result: RunResult | None = None
    changed: set[str] = field(default_factory=set)
    error: str | None = None  # the child could not run at all (a broken trajectory dir, a bug)


def child_trajectory(parent: Parent, number: int, description: str) -> Path:
    """Next to nothing --resume lists: a directory of the parent's children (the parent's record names each)."""
    slug = re.sub(r"[^a-z0-9]+", "-", description.lower()).strip("-")[:30] or "task"
    unique = secrets.token_hex(2)  # a follow-up run of the same parent numbers its children from 1 again
    return parent.trajectory_dir / "subagents" / f"{parent.parent_id}.{number}-{slug}-{unique}.jsonl"


class _Locked:
    """A callable the children share (the approver, the checkpointer), called one child at a time."""

    def __init__(self, inner: Callable[..., Any], lock: threading.Lock):
        self.inner, self.lock = inner, lock

    @property
    def mode(self) -> str | None:  # read when asked: an editor can switch modes during a turn
        return getattr(self.inner, "mode", None)

    def __call__(self, *args: Any) -> Any:
        with self.lock:
            return self.inner(*args)


class _LockedHooks:
    """The parent's hooks for a child: they run (and tell the parent's stream) one child at a time."""

    def __init__(self, hooks: ToolHooks, lock: threading.Lock):
        self.hooks, self.lock = hooks, lock

    def before(self, tool: str, arguments: dict[str, Any]) -> str | None:
        with self.lock:
            return self.hooks.before(tool, arguments)

    def after(self, tool: str, arguments: dict[str, Any], observation: Observation) -> Observation:
        with self.lock:
            return self.hooks.after(tool, arguments, observation)

    def review_stop(self, reason: str, summary: str | None, changed: Any) -> str | None:
        with self.lock:
            return self.hooks.review_stop(reason, summary, changed)


class Progress:
    """The child's loop events, told to the parent as one live line's worth (step, tokens, status)."""

    EVERY = 0.5  # seconds between two rows' worth of progress while the child writes

    def __init__(self, emit: Callable[..., None], child_id: str, started: float):
        self.emit_parent, self.child_id, self.started = emit, child_id, started
        self.step = self.tokens = 0
        self.writing = 0  # characters of the turn being written: the row counts them as it streams
        self.said = 0.0

    def emit(self, kind: str, **data: Any) -> None:
        status = None
        if kind == "step_start":
            self.step, status, self.writing = data.get("step", self.step), "thinking", 0
        elif kind == "text_delta":
            self.writing += len(data.get("text") or "")
            if time.monotonic() - self.said < self.EVERY:
                return
            # an estimate (4 characters a token) until the turn's own count comes at its end; the row
            # said "0 tokens" all through a child's first turn (issue 49)
            self.emit_parent("subagent_progress", child_id=self.child_id, step=self.step,
                             tokens=self.tokens + max(1, self.writing // 4), status="writing",
                             seconds=round(time.monotonic() - self.started, 3))
            self.said = time.monotonic()
            return
        elif kind == "model_turn":
            self.writing = 0
            usage = data.get("usage") or {}
            self.tokens = usage.get("total_prompt_tokens", 0) + usage.get("total_completion_tokens", 0)
            calls = [c.get("name") for c in data.get("calls") or []]
            status = f"running {', '.join(calls)}" if calls else "answering"
        if status is not None:
            self.emit_parent("subagent_progress", child_id=self.child_id, step=self.step, tokens=self.tokens,
                             status=status, seconds=round(time.monotonic() - self.started, 3))


def run_child(parent: Parent, task: ChildTask, model: Any, emit: Callable[..., None], path: Path,
              nested: Callable[[Parent, Limits], Handler] | None = None) -> ChildOutcome:
    """Run ``task`` to a stop reason, its events written to ``path``."""
    outcome = ChildOutcome(task, path.stem, path)
    started = time.monotonic()
    try:
        writer = TrajectoryWriter(path)
    except Exception as exc:  # ConfigError: the directory cannot be written
        outcome.error = str(exc)
        return outcome
    sink = MultiSink(writer, Progress(emit, outcome.child_id, started))
    try:
        guard = scoped_guard(parent.guard, task.scope if task.write else ())
        # its commands die with the group's stop: bwrap and every process in its namespace
        executor = with_stop(parent.executor, parent.stop) if parent.executor and parent.stop else parent.executor
        ctx = ToolContext(parent.root, executor or _NoCommands(), parent.cfg["command_timeout"],
                          parent.command_env, _Locked(parent.approve, parent.lock),  # type: ignore[arg-type]
                          checkpoint=_Locked(parent.checkpoint, parent.lock), stamps=FileStamps(), guard=guard,
                          files=parent.files, emit=sink.emit)
        handlers: dict[str, Handler] = {name: HANDLERS[name] for name in task.tools if name in HANDLERS}
        if TASK_TOOL in task.tools and nested is not None:
            # its children inherit this child's rights (its guard, its scope), its approver and lock
            handlers[TASK_TOOL] = nested(dataclasses.replace(parent, depth=parent.depth + 1, parent_id=outcome.child_id,
                                                             guard=guard, approve=ctx.approve, checkpoint=ctx.checkpoint,
                                                             lock=threading.Lock()), task.limits)
        specs = load_tool_specs(names=(*task.tools, FINISH))
        toolbox = Toolbox(ctx, specs, handlers, hooks=_LockedHooks(parent.hooks, parent.lock) if parent.hooks else None)
        conversation = Conversation()
        text = framed(task)
        cfg = parent.cfg.with_overrides({"context.map_tokens": min(parent.cfg["context.map_tokens"],
                                                                    parent.cfg["subagents.map_tokens"])}, "subagent")
        prompt = ContextAssembler(parent.root, cfg, parent.env, True).prompt_for(
            conversation, text, specs, model, parent.cfg["max_new_tokens"], sink)
        prompt.base_system = prompt.base_system + SUBAGENT_RULES
        agent = Agent(model, toolbox, prompt, task.limits, parent.params, sink, interactive=True)
        outcome.result = agent.run(conversation, text)
        outcome.changed = set(ctx.changed)
    finally:
        writer.close()
    return outcome


def framed(task: ChildTask) -> str:
    """The child's one user message: the profile's instructions, the subtask, its scope and rights."""
    parts = []
    if task.profile is not None:
        parts.append(f"# Your role ({task.profile.name})\n{task.profile.prompt}")
    parts.append(f"# Subtask: {task.description}\n{task.prompt}")
    if task.scope:
        shown = ", ".join(task.shown_paths or (str(p) for p in task.scope))
        rights = "You may change files only inside these paths." if task.write else "You may only read; change nothing."
        parts.append(f"# Paths\n{shown}\n{rights}")
    elif not task.write:
        parts.append("You may only read; change nothing.")
    return "\n\n".join(parts)


def report(outcome: ChildOutcome, limit: int) -> Observation:
    """The parent's observation: one bounded report, marked as the subagent's words."""
    task, result = outcome.task, outcome.result
    head = f'Subagent "{task.description}"'
    data: dict[str, Any] = {"subagent": outcome.child_id, "trajectory": str(outcome.trajectory)}
    if result is None:
        return Observation(False, f"{head} could not run: {outcome.error}", data)
    tokens = result.prompt_tokens + result.completion_tokens
    data.update(stop_reason=result.stop.value, steps=result.steps, changed_files=sorted(outcome.changed),
                usage={"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens})
    done = result.stop in (StopReason.FINISHED, StopReason.ANSWERED)
    plural = "" if result.steps == 1 else "s"
    status = ("finished" if done else f"stopped: {result.detail}") + f" ({result.steps} step{plural}, {tokens} tokens, {result.seconds:.1f} s)"
    body = (result.summary or "").strip()
    if len(body) > limit:
        body = body[:limit] + f"\n[… report cut: {len(body) - limit} more characters; the whole run is in {outcome.trajectory}]"
    changed = f"\nFiles it changed: {', '.join(sorted(outcome.changed))}" if outcome.changed else ""
    text = f"{head} {status}.{changed}\n"
    text += f"Its report (the subagent's words, not the user's):\n{body}" if body else "It left no report."
    return Observation(done, text, data)


class _NoCommands:
    """The executor of a child that may run no commands (the parent runs unsandboxed)."""

    name = "none"

    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a subagent without a sandbox runs no commands")

"""The ``task`` tool's handler: plans each call's child (agent, rights, scope, budget), refuses what
may not run before anything starts, runs the rest at once on threads over the shared model, and
turns each child's outcome into its observation. The events it adds to the parent's stream:
``subagent_started``, ``subagent_progress``, ``subagent_completed`` (docs/subagents.md)."""

from __future__ import annotations

import concurrent.futures as futures
import dataclasses
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from clovercode.actions.approval import RunCancelled
from clovercode.actions.context import Observation, ToolContext, ToolError
from clovercode.agent.budget import Limits, StopReason
from clovercode.agent.deadline import TimeLimitReached
from clovercode.backends.base import ModelBackend
from clovercode.subagents.child import ChildOutcome, ChildTask, Parent, child_trajectory, report, run_child
from clovercode.ground.termination import ENDING, interrupt_detail
from clovercode.subagents.models import ChildStop, SharedModel
from clovercode.subagents.profiles import AgentProfile
from clovercode.subagents.rights import (WRITE_TOOLS, child_tools, overlapping, resolve_paths, writes_allowed)

STOP_WAIT = 2.0  # seconds the parent waits for its children to stop after an interrupt (they take < 0.3 s)


@dataclass(frozen=True)
class _Call:
    id: str
    arguments: dict[str, Any]


class _CancelAll:
    """The parent's approver for a group: a person who cancels at a child's question cancels the run,
    every child with it, as Esc at the parent's own question does."""

    def __init__(self, inner: Callable[..., bool], cancel: ChildStop):
        self.inner, self.cancel, self.cancelled = inner, cancel, False

    @property
    def mode(self) -> str | None:  # read when asked: an editor can switch modes during a turn
        return getattr(self.inner, "mode", None)

    def __call__(self, request: Any) -> bool:
        try:
            return self.inner(request)
        except RunCancelled:
            self.cancelled = True
            self.cancel.set()
            raise


class TaskTool:
    def __init__(self, parent: Parent, backend: ModelBackend, profiles: dict[str, AgentProfile], limits: Limits):
        self.parent, self.backend, self.profiles, self.limits = parent, backend, profiles, limits
        self._numbers = iter(range(1, 1 << 30))
        self._emit_lock = threading.Lock()

    def __call__(self, ctx: ToolContext, args: dict[str, Any]) -> Observation:
        return self.run_group(ctx, [_Call("", args)])[0]

    def nested(self, parent: Parent, limits: Limits) -> "TaskTool":
        """The task tool of a child (when subagents.max_depth allows): its budget is the child's."""
        return TaskTool(parent, self.backend, self.profiles, limits)

    def run_group(self, ctx: ToolContext, calls: Sequence[Any]) -> list[Observation]:
        """Every call's observation, in order; the children of all of them ran at once."""
        planned: list[ChildTask | Observation] = []
        left = _left(ctx, self.limits)
        for call in calls:
            try:
                planned.append(self._plan(call, len(calls), left))
            except ToolError as exc:
                planned.append(Observation(False, f"Error: {exc}"))
        _refuse_overlaps(planned, self.parent.root)
        tasks = [p for p in planned if isinstance(p, ChildTask)]
        outcomes = self._run(ctx, tasks) if tasks else {}
        limit = self.parent.cfg["subagents.report_chars"]
        out = []
        for item in planned:
            if isinstance(item, Observation):
                out.append(item)
            else:
                outcome = outcomes[item.number]
                ctx.changed.update(outcome.changed)  # the parent's change set holds its children's changes
                out.append(report(outcome, limit))
        return out

    def _plan(self, call: Any, siblings: int, left: Limits) -> ChildTask:
        args = call.arguments
        cfg = self.parent.cfg
        spent = [what for what, none in (("steps", left.max_steps <= 0), ("time", left.max_time < 0),
                                         ("tokens", left.max_tokens < 0)) if none]
        if spent:
            raise ToolError(f"Not started: this run has no {' or '.join(spent)} left for a subagent. "
                            "Finish with what you have.")
        profile = None
        if args.get("agent"):
            profile = self.profiles.get(args["agent"])
            if profile is None:
                known = ", ".join(sorted(self.profiles)) or "none are configured"
                raise ToolError(f"There is no subagent named '{args['agent']}' (available: {known}). "
                                "Leave agent out for a general-purpose subagent.")
        given = [str(p) for p in args.get("paths") or []]
        scope = tuple(resolve_paths(self.parent.root, given))
        wants_write = bool(args.get("write")) or (profile is not None and profile.tools is not None
                                                  and any(t in WRITE_TOOLS for t in profile.tools))
        if wants_write:
            why = writes_allowed(self.parent.approve, self.parent.guard, scope)
            if why is not None:
                raise ToolError(f"A subagent with write rights cannot run: {why}. Give it a read-only task.")
            if not scope:
                raise ToolError("A subagent with write rights needs paths: the files or directories it may change.")
        depth_left = cfg["subagents.max_depth"] - self.parent.depth
        tools = child_tools(profile.tools if profile else None, wants_write, self.parent.executor is not None, depth_left)
        return ChildTask(next(self._numbers), call.id, args["description"].strip(), args["prompt"], profile, scope,
                         wants_write, tuple(tools), self._limits(profile, siblings, left), tuple(given))

    def _limits(self, profile: AgentProfile | None, siblings: int, left: Limits) -> Limits:
        """A share of what is left of the parent's budget, never more: steps and time capped by what
        the parent has left, its tokens left split among the children of the turn."""
        cfg, mine = self.parent.cfg, left
        steps = min(cfg["subagents.max_steps"], mine.max_steps, *(x for x in [profile and profile.max_steps] if x))
        times = [t for t in (cfg["subagents.max_time"], mine.max_time, profile and profile.max_time) if t]
        tokens = [t for t in (cfg["subagents.max_tokens"], mine.max_tokens // max(1, siblings) if mine.max_tokens else 0,
                              profile and profile.max_tokens) if t]
        return Limits(int(steps), float(min(times)) if times else 0.0, int(min(tokens)) if tokens else 0,
                      mine.max_format_errors, mine.max_repeats, mine.repetition_window)

    def _emit(self, ctx: ToolContext) -> Callable[..., None]:
        def emit(kind: str, **data: Any) -> None:
            with self._emit_lock:  # the parent's sinks (its trajectory, the screen) hear one child at a time
                ctx.emit(kind, **data)
        return emit

    def _run(self, ctx: ToolContext, tasks: list[ChildTask]) -> dict[int, ChildOutcome]:
        group = _Group(self._emit(ctx))
        parallel = min(self.parent.cfg["subagents.max_parallel"], len(tasks))
        shared = SharedModel(self.backend, parallel)
        cancel = ChildStop(self.parent.stop)  # a nested group stops with the child that started it
        approver = _CancelAll(self.parent.approve, cancel)
        parent = dataclasses.replace(self.parent, approve=approver)
        outcomes: dict[int, ChildOutcome] = {}
        pool = futures.ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="clovercode-subagent")
        running: dict[futures.Future, ChildTask] = {}
        finished, left = threading.Event(), [len(tasks)]

        def ended(_: futures.Future) -> None:
            with self._emit_lock:
                left[0] -= 1
                if not left[0]:
                    finished.set()
        try:
            for task in tasks:  # started in call order, here; each child's later events come as they happen
                path = child_trajectory(self.parent, task.number, task.description)
                group.paths[task.number] = path
                group.emit("subagent_started", parent_id=self.parent.parent_id, call_id=task.call_id,
                           child_id=path.stem, description=task.description,
                           agent=task.profile.name if task.profile else None, write=task.write,
                           paths=list(task.shown_paths), tools=list(task.tools), limits=task.limits.__dict__,
                           batched=shared.batched, trajectory=str(path))
                future = pool.submit(self._child, parent, task, path, shared, cancel, group)
                running[future] = task
                future.add_done_callback(ended)
            # the batched model runs here, on the thread that loaded it; a nested group's driver (its
            # parent child's thread) is stopped by that child's stop, as no signal reaches it
            shared.drive(finished, self.parent.stop)
        except KeyboardInterrupt as exc:
            ENDING.deliver()  # a second signal from here on must not cut the children's stop short
            # every child at once: its model stream at the next event, its command (bwrap and all in
            # it) within a quarter second; each ends and says so (subagent_completed)
            if cancel.is_set():  # set already: by a cancel at a question, or with the outer group's reason
                pass
            elif isinstance(exc, TimeLimitReached):
                cancel.set("max_time", "the parent reached its time limit")
            else:
                cancel.set("cancelled", str(exc) if isinstance(exc, RunCancelled) else interrupt_detail(exc))
            shared.close()
            for future, task in running.items():  # still waiting behind subagents.max_parallel: never starts
                if future.cancel():
                    group.stopped(self.parent.parent_id, task, cancel.reason, "stopped by its parent before it started")
            futures.wait(running, timeout=STOP_WAIT)
            for future, task in running.items():  # a child stuck past STOP_WAIT is reported as stopped
                if not future.done():
                    group.stopped(self.parent.parent_id, task, cancel.reason,
                                  f"did not stop within {STOP_WAIT:g} s of its parent; left behind")
            self._charge(ctx, [f.result() for f in running if f.done() and not f.cancelled() and f.exception() is None])
            raise
        finally:
            group.close()  # a child that ends later adds nothing after its parent's answer
            pool.shutdown(wait=False, cancel_futures=True)
            shared.close()
        if approver.cancelled:
            self._charge(ctx, [f.result() for f in running])
            raise RunCancelled("cancelled by the user at an approval prompt")
        for future, task in running.items():
            outcomes[task.number] = future.result()
        self._charge(ctx, list(outcomes.values()))
        return outcomes

    @staticmethod
    def _charge(ctx: ToolContext, outcomes: list[ChildOutcome]) -> None:
        """The children's tokens are the parent's: they count in its usage and against its limit."""
        budget = getattr(ctx, "budget", None)
        for outcome in outcomes:
            if budget is not None and outcome.result is not None:
                budget.charge(outcome.result.prompt_tokens, outcome.result.completion_tokens)

    def _child(self, parent: Parent, task: ChildTask, path: Path, shared: SharedModel, cancel: ChildStop,
               group: "_Group") -> ChildOutcome:
        try:
            outcome = run_child(dataclasses.replace(parent, stop=cancel), task, shared.for_child(task.label, cancel),
                                group.emit, path, self.nested)
        except Exception as exc:  # a child's bug must not take the parent's run down: it is its report
            outcome = ChildOutcome(task, path.stem, path, error=f"{type(exc).__name__}: {exc}")
        result = outcome.result
        stop, detail = (result.stop.value, result.detail) if result else ("error", outcome.error)
        if cancel.is_set() and result is not None and result.stop is StopReason.INTERRUPTED:
            # stopped by its parent: cancelled, or the parent's time limit
            stop, detail = cancel.reason, f"stopped by its parent: {cancel.detail}"
        group.completed(task.number, parent_id=self.parent.parent_id, call_id=task.call_id, child_id=outcome.child_id,
                        description=task.description, stop_reason=stop, detail=detail, steps=result.steps if result else 0,
                        usage={"prompt_tokens": result.prompt_tokens if result else 0,
                               "completion_tokens": result.completion_tokens if result else 0},
                        seconds=round(result.seconds, 3) if result else 0.0, changed_files=sorted(outcome.changed),
                        trajectory=str(outcome.trajectory))
        return outcome


class _Group:
    """The events of one group of children into the parent's stream: each child's
    ``subagent_completed`` exactly once (by the child, or by the parent for a child that did not stop
    within STOP_WAIT), nothing once the group is over."""

    def __init__(self, emit: Callable[..., None]):
        self._emit, self._lock, self._closed = emit, threading.Lock(), False
        self._completed: set[int] = set()
        self.paths: dict[int, Path] = {}  # each child's trajectory, by its number

    def emit(self, kind: str, **data: Any) -> None:
        with self._lock:
            if not self._closed:
                self._emit(kind, **data)

    def completed(self, number: int, **data: Any) -> None:
        with self._lock:
            if not self._closed and number not in self._completed:
                self._completed.add(number)
                self._emit("subagent_completed", **data)

    def stopped(self, parent_id: str, task: ChildTask, reason: str, detail: str) -> None:
        """The parent's word for a child that did not end by itself (not started, or stuck)."""
        path = self.paths[task.number]
        self.completed(task.number, parent_id=parent_id, call_id=task.call_id, child_id=path.stem,
                       description=task.description, stop_reason=reason, detail=detail, steps=0,
                       usage={"prompt_tokens": 0, "completion_tokens": 0}, seconds=0.0, changed_files=[],
                       trajectory=str(path))

    def close(self) -> None:
        with self._lock:
            self._closed = True


def _left(ctx: ToolContext, limits: Limits) -> Limits:
    """What is left of the parent's run (agent/loop.py sets ``ctx.budget``); its whole limits elsewhere.
    A limit of 0 is none; a negative one is spent."""
    budget = getattr(ctx, "budget", None)
    return budget.left() if budget is not None else limits


def _refuse_overlaps(planned: list[ChildTask | Observation], root: Any) -> None:
    """Two writing children whose paths meet: both refused before either starts."""
    writers = [(i, p) for i, p in enumerate(planned) if isinstance(p, ChildTask) and p.write]
    clash: dict[int, tuple[str, Any]] = {}
    for a, (i, first) in enumerate(writers):
        for j, second in writers[a + 1:]:
            where = overlapping(first.scope, second.scope)
            if where is not None:
                clash.setdefault(i, (second.description, where))
                clash.setdefault(j, (first.description, where))
    for index, (other, where) in clash.items():
        try:
            where = where.relative_to(root.resolve()).as_posix() or "."
        except ValueError:
            pass
        planned[index] = Observation(False, f'Error: not started: the subagent "{other}" of this turn may also write '
                                            f"{where}. Give writing subagents paths that do not overlap, "
                                            "or run them one after another.")

"""The agent loop: prompt → model → parse → validate → execute → observe, until a stop reason.

One step is one model turn. Invalid output never executes: it becomes an observation that tells the
model what was wrong. Every run ends with an explicit StopReason.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from clovercode.actions.approval import RunCancelled
from clovercode.actions.context import Observation
from clovercode.actions.toolbox import FINISH, Toolbox
from clovercode.agent.budget import Limits, RepeatTracker, StopReason
from clovercode.agent.events import EventSink, RecordingSink
from clovercode.ground.messages import CallRecord, Message
from clovercode.agent.prompts import Conversation, PromptBuilder
from clovercode.agent.repetition import RepetitionGuard
from clovercode.backends.base import Finish, GenerationParams, ModelBackend, ModelError, Notice, TextDelta, ToolCallEvent, Usage
from clovercode.agent.deadline import TimeLimitReached, deadline
from clovercode.ground.termination import ENDING, interrupt_behind, interrupt_detail
from clovercode.toolcalls.parser import ParsedCall, parse_turn
from clovercode.toolcalls.review import TurnReview, review_turn
from clovercode.toolcalls.validate import CheckedCall, Validator


@dataclass
class RunResult:
    stop: StopReason
    steps: int
    detail: str  # why the run stopped, for people
    summary: str | None = None  # the model's finish summary or final answer
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    changed: list[str] = field(default_factory=list)
    signal: int | None = None  # INTERRUPTED by SIGTERM/SIGHUP rather than Ctrl-C
    usage_estimated: bool = False  # some turn's tokens were estimated, not counted by the server or tokenizer

    def to_json(self) -> dict[str, Any]:
        return {"stop_reason": self.stop.value, "steps": self.steps, "detail": self.detail, "summary": self.summary,
                "usage": usage_json(self.prompt_tokens, self.completion_tokens, self.usage_estimated),
                "seconds": round(self.seconds, 3), "changed_files": self.changed}


@dataclass
class _State:
    started: float
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    format_errors: int = 0
    usage_estimated: bool = False


EMPTY_REPLY = ("Your reply had no answer: nothing outside the reasoning and no tool call. Answer the task in plain "
               "text, or call a tool.")


class RunBudget:
    """What is left of one run's limits while it runs, for tools that start work of their own (the
    task tool's children share the parent's remaining steps, time and tokens), and where that work's
    tokens are charged: they count in the run's usage and against its token limit."""

    def __init__(self, limits: Limits, state: _State, clock: Callable[[], float]):
        self.limits, self.state, self.clock = limits, state, clock

    def left(self) -> Limits:
        """The limits left now: 0 is no limit, as in Limits; a spent time or token limit is -1."""
        limits, state = self.limits, self.state
        seconds = limits.max_time - (self.clock() - state.started) if limits.max_time else 0.0
        tokens = limits.max_tokens - state.prompt_tokens - state.completion_tokens if limits.max_tokens else 0
        return Limits(max(0, limits.max_steps - state.steps), seconds if seconds > 0 or not limits.max_time else -1.0,
                      tokens if tokens > 0 or not limits.max_tokens else -1, limits.max_format_errors,
                      limits.max_repeats, limits.repetition_window)

    def charge(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.state.prompt_tokens += prompt_tokens
        self.state.completion_tokens += completion_tokens


class _Stop(Exception):
    def __init__(self, reason: StopReason, detail: str, summary: str | None = None):
        super().__init__(detail)
        self.reason, self.detail, self.summary = reason, detail, summary


class Agent:
    def __init__(self, backend: ModelBackend, toolbox: Toolbox, prompt: PromptBuilder, limits: Limits,
                 params: GenerationParams, sink: EventSink | None = None, *, interactive: bool = False,
                 clock: Callable[[], float] = time.monotonic):
        self.backend, self.toolbox, self.prompt = backend, toolbox, prompt
        self.limits, self.params, self.interactive, self.clock = limits, params, interactive, clock
        self.sink = sink or RecordingSink()

    @property
    def validator(self) -> Validator:
        return self.toolbox.validator()  # rebuilt when an MCP server's tool list changes

    def run(self, conversation: Conversation, task: str, *, tag: str = "goal") -> RunResult:
        """Add ``task`` as a user message tagged ``tag`` and run until a stop reason.

        A later call on the same conversation continues it: ``fix`` sends test failures back with
        ``tag="feedback"`` after the model called finish, so the original goal stays the goal.
        """
        conversation.add(Message("user", task, tags=frozenset({tag})))
        state = _State(started=self.clock())
        self.toolbox.ctx.budget = RunBudget(self.limits, state, self.clock)
        repeats = RepeatTracker(self.limits.max_repeats)
        self.sink.emit("run_start", task=task, model=self.backend.name, executor=self.toolbox.ctx.executor.name,
                       tools=self.toolbox.names, limits=self.limits.__dict__)
        try:
            with deadline(self.limits.max_time):
                while True:
                    ENDING.check()  # a signal whose interrupt was lost (raised inside a __del__) acts here
                    self._check_budget(state)
                    self._step(conversation, state, repeats)
        except _Stop as stop:
            result = self._result(state, stop.reason, stop.detail, stop.summary)
        except TimeLimitReached:  # inside a step: the command or the model's turn was cut at the deadline
            result = self._result(state, StopReason.MAX_TIME, f"reached the time limit ({self.limits.max_time:g} s) "
                                  f"during step {state.steps}")
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM/SIGHUP (termination.py), or cancelled at an approval prompt
            ENDING.deliver()  # the run is ending: the check points stop raising a recorded signal
            detail = str(exc) if isinstance(exc, RunCancelled) else interrupt_detail(exc)
            result = self._result(state, StopReason.INTERRUPTED, detail)
            result.signal = getattr(exc, "signum", None)
        except ModelError as exc:
            result = self._result(state, StopReason.MODEL_ERROR, f"the model failed: {exc}")
        except Exception as exc:
            interrupt = interrupt_behind(exc)  # an interrupt that library clean-up turned into an error
            if interrupt is None:
                raise
            ENDING.deliver()
            if isinstance(interrupt, TimeLimitReached):
                result = self._result(state, StopReason.MAX_TIME, f"reached the time limit ({self.limits.max_time:g} s) "
                                      f"during step {state.steps}")
            else:
                result = self._result(state, StopReason.INTERRUPTED, interrupt_detail(interrupt))
                result.signal = getattr(interrupt, "signum", None)
        self.sink.emit("run_end", **result.to_json(), **({"signal": result.signal} if result.signal else {}))
        return result

    def _result(self, state: _State, reason: StopReason, detail: str, summary: str | None = None) -> RunResult:
        return RunResult(reason, state.steps, detail, summary, state.prompt_tokens, state.completion_tokens,
                         self.clock() - state.started, sorted(self.toolbox.ctx.changed),
                         usage_estimated=state.usage_estimated)

    def _check_budget(self, state: _State) -> None:
        limits = self.limits
        if state.steps >= limits.max_steps:
            plural = "" if limits.max_steps == 1 else "s"
            raise _Stop(StopReason.MAX_STEPS, f"reached the step limit ({limits.max_steps} step{plural})")
        if limits.max_time and self.clock() - state.started >= limits.max_time:
            raise _Stop(StopReason.MAX_TIME, f"reached the time limit ({limits.max_time:g} s)")
        if limits.max_tokens and state.prompt_tokens + state.completion_tokens >= limits.max_tokens:
            raise _Stop(StopReason.MAX_TOKENS, f"reached the token limit ({limits.max_tokens} tokens)")

    def _step(self, conversation: Conversation, state: _State, repeats: RepeatTracker) -> None:
        state.steps += 1
        self.sink.emit("step_start", step=state.steps, max_steps=self.limits.max_steps)
        for category, note, quiet in self.toolbox.take_notes():  # tools that joined or failed since the last turn
            self.sink.emit("warning", text=note, category=category, **({"quiet": True} if quiet else {}))
        started = self.clock()
        self._partial: tuple[list[str], Usage] = ([], Usage())
        try:
            text, server_calls, usage, guard = self._generate(self.prompt.build(conversation))
        except ModelError:
            state.steps -= 1  # the turn never happened: a model_error run counts only the steps it took
            raise
        except KeyboardInterrupt:  # Esc, Ctrl-C, a signal or the time limit, mid-turn
            parts, so_far = self._partial
            if not "".join(parts).strip():
                state.steps -= 1  # nothing was written: no turn to count
            else:  # what was streamed was generated and paid for
                text = "".join(parts)
                cut = Usage(so_far.prompt_tokens, self._count(text), extra={"usage_estimated": True})
                state.prompt_tokens += cut.prompt_tokens
                state.completion_tokens += cut.completion_tokens
                state.usage_estimated = True
                # the step it counts as is on record: its text as far as it got (trajectory, model_text)
                parsed = parse_turn(text)
                self.sink.emit("model_turn", step=state.steps, raw=text, content=parsed.content,
                               reasoning=parsed.reasoning, calls=[], errors=[], usage=_usage_json(cut, state),
                               seconds=round(self.clock() - started, 4), cut=True)
            raise
        state.prompt_tokens += usage.prompt_tokens
        state.completion_tokens += usage.completion_tokens
        state.usage_estimated = state.usage_estimated or bool(usage.extra.get("usage_estimated"))
        review = review_turn(text, self.validator, step=state.steps, require_call=not self.interactive,
                             server_calls=server_calls)
        turn, checked = review.turn, review.checked
        conversation.add(Message("assistant", turn.content, turn.reasoning,
                                 tuple(CallRecord(c.id, c.name, c.arguments) for c in checked)))
        self.sink.emit("model_turn", step=state.steps, raw=text, content=turn.content, reasoning=turn.reasoning,
                       calls=[_call_json(c, parsed) for c, parsed in zip(checked, turn.calls)],
                       errors=turn.errors, usage=_usage_json(usage, state), seconds=round(self.clock() - started, 4),
                       **({"server_calls": [{"name": c.name, "arguments": c.arguments} for c in server_calls]}
                          if server_calls else {}))
        empty = self.interactive and not checked and not turn.errors and not turn.content.strip()
        self._handle_format(conversation, state, review, empty)
        if guard.tripped:
            self.sink.emit("warning", text=f"the reply was cut: it kept repeating {guard.unit()!r}", category="loop")
            if not self.interactive:  # in the REPL the turn ends and the person decides what to say
                conversation.add(Message("user", guard.feedback(), tags=frozenset({"feedback"})))
        pending = review.runnable
        running_since: float | None = None  # when the call now running started (an interrupt reports its time)
        try:
            while pending:
                call = pending[0]
                if call.name == FINISH:
                    objection = self.toolbox.review_stop("finished", call.arguments.get("summary"))
                    if objection is not None:  # a stop hook sends the model back to work
                        self._observe(conversation, call, Observation(False, objection))
                    for skipped in pending[1:]:
                        self._observe(conversation, skipped, Observation(False, "Not run: it came after finish."))
                    if objection is None:
                        raise _Stop(StopReason.FINISHED, "the model called finish", call.arguments.get("summary"))
                    pending.clear()
                    break
                group = self.toolbox.group_size(pending)
                if group:  # e.g. several task calls: their subagents run at once
                    calls = pending[:group]
                    for one in calls:
                        self.sink.emit("tool_call", step=state.steps, id=one.id, name=one.name, arguments=one.arguments)
                    running_since = self.clock()
                    observations = self.toolbox.execute_group(calls)
                    seconds, running_since = self.clock() - running_since, None
                    for one, observation in zip(calls, observations):
                        pending.pop(0)
                        self._after_call(conversation, one, observation, repeats, seconds)
                    continue
                self.sink.emit("tool_call", step=state.steps, id=call.id, name=call.name, arguments=call.arguments)
                running_since = self.clock()
                observation = self.toolbox.execute(call)
                seconds, running_since = self.clock() - running_since, None
                pending.pop(0)
                self._after_call(conversation, call, observation, repeats, seconds)
        except KeyboardInterrupt as exc:
            signal_name = getattr(exc, "name", None)  # SIGTERM / SIGHUP (termination.Terminated), else the user
            if isinstance(exc, TimeLimitReached):
                by = "Stopped at the run's time limit"
            else:
                by = f"Stopped by {signal_name}" if signal_name else "Interrupted by the user"
            for index, call in enumerate(pending):  # every call in the history gets an answer, even an interrupted one
                started = index == 0 and running_since is not None
                ran = self.clock() - running_since if started else 0.0
                text = f"{by} before it finished." if started else f"Not run: {by[0].lower()}{by[1:]} before it started."
                self._observe(conversation, call, Observation(False, text), ran)
            raise
        if empty:  # reasoning only, or nothing: no answer was given, whatever ended the turn
            if guard.tripped:
                raise _Stop(StopReason.FORMAT_ERRORS, "the reply held no answer, only reasoning, and was cut: it kept repeating")
            conversation.add(Message("user", EMPTY_REPLY, tags=frozenset({"feedback"})))
            self.sink.emit("format_error", step=state.steps, text=EMPTY_REPLY)
        elif not checked and not turn.errors and self.interactive:
            objection = self.toolbox.review_stop("answered", turn.content)
            if objection is None:
                raise _Stop(StopReason.ANSWERED, "the model answered", turn.content)
            conversation.add(Message("user", objection, tags=frozenset({"feedback"})))
            self.sink.emit("warning", text="a stop hook sent the model back to work", category="hook")
        if state.format_errors >= self.limits.max_format_errors:
            raise _Stop(StopReason.FORMAT_ERRORS,
                        f"{state.format_errors} consecutive turns without a valid tool call (limit {self.limits.max_format_errors})")

    def _generate(self, messages: list[Message]) -> tuple[str, list[ParsedCall], Usage, RepetitionGuard]:
        parts: list[str] = []
        calls: list[ParsedCall] = []
        usage = Usage()
        guard = RepetitionGuard(self.limits.repetition_window)
        in_reasoning = False  # servers stream reasoning in many deltas: they form one <think> block
        events = self.backend.generate(messages, self.toolbox.specs, self.params)
        self._partial = (parts, usage)
        try:
            for event in events:
                ENDING.check()  # a check point at every model event (main thread only)
                if isinstance(event, TextDelta):
                    if event.reasoning != in_reasoning:
                        parts.append("<think>" if event.reasoning else "</think>")
                        guard.feed(parts[-1])
                        in_reasoning = event.reasoning
                    parts.append(event.text)
                    self.sink.emit("text_delta", text=event.text, reasoning=event.reasoning)
                    if guard.feed(event.text):
                        break  # a loop: closing the stream stops the backend's generation
                elif isinstance(event, ToolCallEvent):
                    calls.append(_server_call(event))
                elif isinstance(event, Usage):
                    usage = event
                    self._partial = (parts, usage)
                elif isinstance(event, Notice):
                    self.sink.emit("warning", text=event.text, category="model", **({} if event.loud else {"quiet": True}))
                elif isinstance(event, Finish):
                    break
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
        text = "".join(parts)
        if guard.tripped:  # the usage event never came: count what was written
            text = guard.trimmed()
            usage = Usage(usage.prompt_tokens, self._count("".join(parts)),
                          extra={**usage.extra, "cut": "repetition", "usage_estimated": True})
        elif text and not usage.completion_tokens:  # a server that counts nothing: what it streamed still counts
            usage = Usage(usage.prompt_tokens, self._count(text), usage.forwards, usage.cached_tokens, usage.seconds,
                          extra={**usage.extra, "usage_estimated": True})
        if in_reasoning:
            text += "</think>"
        return text, calls, usage, guard

    def _count(self, written: str) -> int:
        counted = getattr(self.backend, "count_tokens", None)
        return counted(written) if counted else max(1, len(written) // 4)

    def _handle_format(self, conversation: Conversation, state: _State, review: TurnReview, empty: bool = False) -> None:
        for call in review.invalid:
            self._observe(conversation, call, Observation(False, call.error or ""))
            self.sink.emit("format_error", step=state.steps, text=call.error)
        if review.format_feedback:
            conversation.add(Message("user", review.format_feedback, tags=frozenset({"feedback"})))
            self.sink.emit("format_error", step=state.steps, text=review.format_feedback)
        state.format_errors = state.format_errors + 1 if review.has_format_error or empty else 0

    def _after_call(self, conversation: Conversation, call: CheckedCall, observation: Observation,
                    repeats: RepeatTracker, seconds: float) -> None:
        stop = None
        if not observation.ok:
            count = repeats.record_failure(call.name, call.arguments, observation.text)
            warning = repeats.warning(count)
            if warning:
                observation = Observation(False, f"{observation.text}\n\n{warning}", observation.data)
                self.sink.emit("warning", text=warning, category="loop")
            if repeats.exhausted(count):
                stop = _Stop(StopReason.REPEATED_FAILURES, f"the same failing `{call.name}` call was made {count} times")
        self._observe(conversation, call, observation, seconds)
        if stop:
            raise stop

    def _observe(self, conversation: Conversation, call: CheckedCall, observation: Observation, seconds: float = 0.0) -> None:
        conversation.add(Message("tool", observation.text, tool_call_id=call.id, name=call.name))
        self.sink.emit("observation", id=call.id, name=call.name, ok=observation.ok, text=observation.text,
                       data=observation.data, seconds=round(seconds, 4))


def _call_json(call: CheckedCall, parsed: ParsedCall) -> dict[str, Any]:
    """A call of the turn as events carry it; an invalid one with its error and the text the model wrote."""
    out: dict[str, Any] = {"id": call.id, "name": call.name, "arguments": call.arguments, "valid": call.ok}
    return out if call.ok else {**out, "error": call.error, "raw": parsed.raw}


def _server_call(event: ToolCallEvent) -> ParsedCall:
    args: Any = event.arguments
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            args = {"__unparsed__": args}
    if not isinstance(args, dict):
        args = {"__unparsed__": args}
    return ParsedCall(event.name, args, json.dumps({"name": event.name, "arguments": args}), "server")


def usage_json(prompt_tokens: int, completion_tokens: int, estimated: bool) -> dict[str, Any]:
    """A run's token counts as `--json` shows them; ``estimated`` only when some were estimated."""
    out: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    return {**out, "estimated": True} if estimated else out


def _usage_json(usage: Usage, state: _State) -> dict[str, Any]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "forwards": usage.forwards, "total_prompt_tokens": state.prompt_tokens,
            "total_completion_tokens": state.completion_tokens, **usage.extra}

"""`clovercode exec --json`: the loop's events as JSON Lines, one object per line, flushed as they
happen. The shape is a versioned contract (clovercode/schemas/exec-events.schema.json,
docs/usage.md#json-events); fields are only ever added within a version.

The contract a script relies on, kept here whatever order the loop's events come in:
``run_started`` is the first line (a warning said before the loop starts is held back until it is
written), ``run_completed`` the last, and a non-zero exit has an ``error`` event right before it;
every ``observation`` follows a ``tool_call`` with its id. Standard library only: jsonexit.py uses
it for exits that happen before anything slow is imported."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, TextIO

from clovercode.ground.termination import answering

SCHEMA_VERSION = 3
SCHEMA_FILE = "exec-events.schema.json"
LOADING_SECONDS = 5.0  # between model_loading lines while the model loads
WORKING_SECONDS = 10.0  # the longest silence while the model writes a turn: then a model_working line
NOT_STARTED = "error"  # run_completed's stop_reason when the loop never ran (usage, config, model load, …)


def schema_path() -> Path:
    return Path(__file__).resolve().parent.parent / "schemas" / SCHEMA_FILE


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    """Token counts, and ``estimated`` where some were counted by clovercode rather than the model's tokenizer."""
    out: dict[str, Any] = {"prompt_tokens": usage.get("prompt_tokens", 0), "completion_tokens": usage.get("completion_tokens", 0)}
    return {**out, "estimated": True} if usage.get("estimated") or usage.get("usage_estimated") else out


class JsonEventWriter:
    """An EventSink that writes what a script needs of a run; the console renderer and the
    trajectory writer subscribe to the same events. ``deltas``: also write ``model_text_delta``
    as the model writes (exec --include-deltas)."""

    current: ClassVar["JsonEventWriter | None"] = None  # the process's stream, for exits outside run_exec

    def __init__(self, out: TextIO, *, trajectory: Callable[[], Any] = lambda: None,
                 exit_code: Callable[[str, "int | None"], int] = lambda stop, signum: 0,
                 deltas: bool = False, start: dict[str, Any] | None = None):
        self.out, self.trajectory, self.exit_code, self.deltas = out, trajectory, exit_code, deltas
        self.start = dict(start or {})  # run_started's fields known before the loop runs (task, model, …)
        self.started = self.completed = False
        self.held: list[dict[str, Any]] = []  # events that came before run_started
        self.announced: set[str] = set()  # ids of the tool_call events written
        self.turn_calls: dict[str, dict[str, Any]] = {}  # the last turn's calls, valid or not, by id
        self.last_observation: str | None = None  # an invalid call's error arrives twice: as its observation and a format_error
        self.step = 0
        self.filter: Any = None  # the step's StreamFilter (deltas only)
        self.began = time.monotonic()
        self.working_every = WORKING_SECONDS
        self.lock = threading.RLock()  # the model_working thread writes too
        self.last_line = time.monotonic()
        self.turn: tuple[threading.Event, float] | None = None  # the running turn: its stop and its start
        self.chars = 0  # what the model has written of the running turn
        JsonEventWriter.current = self

    def write(self, event: dict[str, Any]) -> None:
        if not self.started and event["type"] != "run_started":
            self.held.append(event)
            return
        self._line(event)
        if event["type"] == "run_started":
            self.started = True
            held, self.held = self.held, []
            for item in held:
                self._line(item)

    def _line(self, event: dict[str, Any]) -> None:
        # ASCII: whatever the locale's encoding, every line is valid JSON that round-trips exactly
        with self.lock:
            self.out.write(json.dumps(event, default=str) + "\n")
            self.out.flush()
            self.last_line = time.monotonic()

    def _working(self, stop: threading.Event, began: float) -> None:
        """A model_working line whenever ``working_every`` seconds pass without a line during a turn."""
        while not stop.wait(max(0.01, self.last_line + self.working_every - time.monotonic())):
            with self.lock:
                if stop.is_set() or self.completed:
                    return
                if time.monotonic() - self.last_line >= self.working_every:
                    self.write({"type": "model_working", "step": self.step, "seconds": round(time.monotonic() - began, 1),
                                "chars": self.chars})

    def _end_turn(self) -> None:
        if self.turn is not None:
            self.turn[0].set()
            self.turn = None

    def emit(self, kind: str, **data: Any) -> None:
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(**data)

    def fail(self, message: str, exit_code: int, stop_reason: str = NOT_STARTED) -> None:
        """A failure outside the loop (a usage or config error, the model cannot load, the sandbox
        cannot start, an interrupt before the loop ran, a bug): run_started if it was not written,
        the error, and a run_completed that agrees with it."""
        if self.completed:
            return
        if not self.started:
            self._write_started(**self.start)
        self.write({"type": "error", "message": message, "exit_code": exit_code})
        self._completed(stop_reason, exit_code, message, None, self.step, {}, time.monotonic() - self.began, [])

    def begin(self) -> None:
        """run_started now, with what is known before the model loads (exec writes it first thing)."""
        if not self.started:
            self._write_started(**self.start)

    @contextmanager
    def loading(self, model: str, every: float = LOADING_SECONDS) -> Iterator[None]:
        """While the model loads (and MCP servers get their start-up wait): a ``model_loading`` line
        every ``every`` seconds, and one with ``done`` when it is over, so a script sees progress."""
        began = time.monotonic()
        lock = threading.Lock()
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(every):
                with lock:
                    if not stop.is_set():
                        self.write({"type": "model_loading", "model": model,
                                    "seconds": round(time.monotonic() - began, 1), "done": False})

        thread = threading.Thread(target=beat, name="clovercode-loading", daemon=True)
        thread.start()
        try:
            yield
        finally:
            with lock:
                stop.set()
            thread.join(timeout=2)
        self.write({"type": "model_loading", "model": model, "seconds": round(time.monotonic() - began, 1), "done": True})

    def _write_started(self, task: str | None = None, model: str | None = None, sandbox: str | None = None,
                       tools: list[str] | None = None, max_steps: int | None = None, session_id: str | None = None) -> None:
        trajectory = self.trajectory()
        self.write({"type": "run_started", "version": SCHEMA_VERSION, "task": task, "model": model, "sandbox": sandbox,
                    "tools": list(tools or []), "max_steps": max_steps,
                    "session_id": session_id or (trajectory.stem if trajectory else None)})

    def _completed(self, stop_reason: str, exit_code: int, detail: str, answer: str | None, steps: int,
                   usage: dict[str, Any], seconds: float, changed_files: list[str]) -> None:
        self._end_turn()
        trajectory = self.trajectory()
        with answering(exit_code):  # the stream's last line is never cut, nor written twice
            self.write({"type": "run_completed", "stop_reason": stop_reason, "exit_code": exit_code, "detail": detail,
                        "answer": answer, "steps": steps, "usage": _usage(usage), "seconds": round(seconds, 4),
                        "changed_files": changed_files, "trajectory": str(trajectory) if trajectory else None})
            self.completed = True

    def _on_run_start(self, task: str, model: str, executor: str, tools: list[str], limits: dict[str, Any], **_: Any) -> None:
        if not self.started:  # a follow-up run of the same session is the same stream
            self._write_started(task, model, executor, tools, limits.get("max_steps"))

    def _on_step_start(self, step: int, **_: Any) -> None:
        self.step = step
        self._end_turn()
        self.chars = 0
        stop = threading.Event()
        self.turn = (stop, time.monotonic())
        threading.Thread(target=self._working, args=(stop, time.monotonic()), name="clovercode-working",
                         daemon=True).start()
        if self.deltas:
            from clovercode.ui.stream import StreamFilter

            self.filter = StreamFilter()

    def _on_text_delta(self, text: str, reasoning: bool = False, **_: Any) -> None:
        self.chars += len(text)
        if not self.deltas or self.filter is None:
            return
        self._deltas([("reasoning", text)] if reasoning else self.filter.feed(text))

    def _deltas(self, parts: list[tuple[str, str]]) -> None:
        for kind, text in parts:
            if text:
                self.write({"type": "model_text_delta", "step": self.step, "text": text, "reasoning": kind == "reasoning"})

    def _on_model_turn(self, step: int, content: str, reasoning: str, usage: dict[str, Any], seconds: float,
                       calls: list[dict[str, Any]] | None = None, **_: Any) -> None:
        self._end_turn()
        if self.filter is not None:
            self._deltas(self.filter.flush())
            self.filter = None
        self.turn_calls = {c["id"]: c for c in calls or []}
        self.write({"type": "model_text", "step": step, "text": content, "reasoning": reasoning,
                    "usage": _usage(usage), "seconds": seconds})

    def _on_tool_call(self, step: int, id: str, name: str, arguments: dict[str, Any], **_: Any) -> None:
        self.announced.add(id)
        self.write({"type": "tool_call", "step": step, "id": id, "name": name, "arguments": arguments, "valid": True})

    def _announce(self, id: str, name: str, error: str) -> None:
        """The tool_call of a call that never ran through the toolbox (invalid, after finish, cut by
        an interrupt), so its observation answers a call the stream has shown."""
        call = self.turn_calls.get(id, {})
        arguments = call.get("arguments")
        event: dict[str, Any] = {"type": "tool_call", "step": self.step, "id": id, "name": call.get("name", name),
                                 "arguments": arguments if isinstance(arguments, dict) else {},
                                 "valid": bool(call.get("valid", False))}
        if not event["valid"]:
            event["error"] = call.get("error") or error
            if call.get("raw"):
                event["raw"] = call["raw"]
        self.announced.add(id)
        self.write(event)

    def _on_observation(self, id: str, name: str, ok: bool, text: str, data: dict[str, Any], seconds: float = 0.0,
                        **_: Any) -> None:
        if id not in self.announced:
            self._announce(id, name, text)
        event: dict[str, Any] = {"type": "observation", "id": id, "name": name, "ok": ok, "text": text,
                                 "seconds": seconds}
        if "exit_code" in data:
            event["exit_code"] = data["exit_code"]
        if data.get("diff"):
            event["diff"] = data["diff"]
        self.last_observation = text
        self.write(event)

    def _on_plan(self, steps: list[dict[str, str]], explanation: str = "", **_: Any) -> None:
        self.write({"type": "plan", "step": self.step, "steps": steps, "explanation": explanation})

    def _on_subagent_started(self, parent_id: str, call_id: str, child_id: str, description: str, agent: str | None,
                             write: bool, paths: list[str], trajectory: str, **_: Any) -> None:
        self.write({"type": "subagent_started", "step": self.step, "parent_id": parent_id, "call_id": call_id,
                    "child_id": child_id, "description": description, "agent": agent, "write": write,
                    "paths": paths, "trajectory": trajectory})

    def _on_subagent_completed(self, parent_id: str, call_id: str, child_id: str, stop_reason: str, detail: str | None,
                               steps: int, usage: dict[str, Any], seconds: float, changed_files: list[str],
                               trajectory: str, **_: Any) -> None:
        self.write({"type": "subagent_completed", "step": self.step, "parent_id": parent_id, "call_id": call_id,
                    "child_id": child_id, "stop_reason": stop_reason, "detail": detail, "steps": steps,
                    "usage": _usage(usage), "seconds": seconds, "changed_files": changed_files,
                    "trajectory": trajectory})

    def _on_format_error(self, step: int, text: str | None, **_: Any) -> None:
        if text and text == self.last_observation:
            return
        self.write({"type": "warning", "category": "format_error", "step": step, "text": text or "invalid tool call"})

    def _on_warning(self, text: str, category: str = "other", quiet: bool = False, **_: Any) -> None:
        # a quiet one is news, not a problem (an MCP server that joined in time)
        self.write({"type": "notice" if quiet else "warning", "category": category, "text": text})

    def _on_hook(self, event: str, command: str, blocked: bool, output: str = "", **_: Any) -> None:
        if blocked:  # a hook that ran quietly is not news; one that objected changes what the model does
            self.write({"type": "warning", "category": "hook", "text": f"{event} hook `{command}` objected: {output}".rstrip(": ")})

    def _on_run_end(self, stop_reason: str, steps: int, detail: str, summary: str | None, usage: dict[str, int],
                    seconds: float, changed_files: list[str], signal: int | None = None, **_: Any) -> None:
        code = self.exit_code(stop_reason, signal)
        if code != 0:  # a script that reads only errors sees every failure, the budget's too
            self.write({"type": "error", "message": detail, "exit_code": code})
        self._completed(stop_reason, code, detail, summary, steps, usage, seconds, changed_files)


def exec_failure(out: TextIO, message: str, exit_code: int, *, interrupted: bool = False) -> None:
    """An exit of ``exec --json`` outside run_exec's own handling (a bad flag, a config error, a
    signal while loading, a bug): the process's stream ends with error + run_completed."""
    current = JsonEventWriter.current
    writer = current if current is not None and current.out is out else JsonEventWriter(out)  # not a stale one
    writer.fail(message, exit_code, "interrupted" if interrupted else NOT_STARTED)

"""`clovercode exec --json`: the loop's events as JSON Lines, one object per line, flushed as they
happen. The shape is a versioned contract (clovercode/schemas/exec-events.schema.json,
docs/usage.md#json-events); fields are only ever added within a version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, TextIO

SCHEMA_VERSION = 1
SCHEMA_FILE = "exec-events.schema.json"


def schema_path() -> Path:
    return Path(__file__).resolve().parent.parent / "schemas" / SCHEMA_FILE


class JsonEventWriter:
    """An EventSink that writes what a script needs of a run; the console renderer and the
    trajectory writer subscribe to the same events."""

    def __init__(self, out: TextIO, *, trajectory: Callable[[], Any] = lambda: None,
                 exit_code: Callable[[str, "int | None"], int] = lambda stop, signum: 0):
        self.out, self.trajectory, self.exit_code = out, trajectory, exit_code
        self.last_observation: str | None = None  # an invalid call's error arrives twice: as its observation and a format_error

    def write(self, event: dict[str, Any]) -> None:
        self.out.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")
        self.out.flush()

    def emit(self, kind: str, **data: Any) -> None:
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(**data)

    def error(self, message: str, exit_code: int) -> None:
        """A failure outside the loop (the model cannot load, the sandbox cannot start)."""
        self.write({"type": "error", "message": message, "exit_code": exit_code})

    def _on_run_start(self, task: str, model: str, executor: str, tools: list[str], limits: dict[str, Any], **_: Any) -> None:
        trajectory = self.trajectory()
        self.write({"type": "run_started", "version": SCHEMA_VERSION, "task": task, "model": model, "sandbox": executor,
                    "tools": list(tools), "max_steps": limits.get("max_steps"),
                    "session_id": trajectory.stem if trajectory else None})

    def _on_model_turn(self, step: int, content: str, reasoning: str, usage: dict[str, Any], seconds: float,
                       **_: Any) -> None:
        self.write({"type": "model_text", "step": step, "text": content, "reasoning": reasoning,
                    "usage": {"prompt_tokens": usage.get("prompt_tokens", 0),
                              "completion_tokens": usage.get("completion_tokens", 0)},
                    "seconds": seconds})

    def _on_tool_call(self, step: int, id: str, name: str, arguments: dict[str, Any], **_: Any) -> None:
        self.write({"type": "tool_call", "step": step, "id": id, "name": name, "arguments": arguments})

    def _on_observation(self, id: str, name: str, ok: bool, text: str, data: dict[str, Any], seconds: float = 0.0,
                        **_: Any) -> None:
        event: dict[str, Any] = {"type": "observation", "id": id, "name": name, "ok": ok, "text": text,
                                 "seconds": seconds}
        if "exit_code" in data:
            event["exit_code"] = data["exit_code"]
        if data.get("diff"):
            event["diff"] = data["diff"]
        self.last_observation = text
        self.write(event)

    def _on_format_error(self, step: int, text: str | None, **_: Any) -> None:
        if text and text == self.last_observation:
            return
        self.write({"type": "warning", "category": "format_error", "step": step, "text": text or "invalid tool call"})

    def _on_warning(self, text: str, category: str = "loop", **_: Any) -> None:
        self.write({"type": "warning", "category": category, "text": text})

    def _on_hook(self, event: str, command: str, blocked: bool, output: str = "", **_: Any) -> None:
        if blocked:  # a hook that ran quietly is not news; one that objected changes what the model does
            self.write({"type": "warning", "category": "hook", "text": f"{event} hook `{command}` objected: {output}".rstrip(": ")})

    def _on_run_end(self, stop_reason: str, steps: int, detail: str, summary: str | None, usage: dict[str, int],
                    seconds: float, changed_files: list[str], signal: int | None = None, **_: Any) -> None:
        trajectory = self.trajectory()
        self.write({"type": "run_completed", "stop_reason": stop_reason, "exit_code": self.exit_code(stop_reason, signal),
                    "detail": detail, "answer": summary, "steps": steps,
                    "usage": {"prompt_tokens": usage.get("prompt_tokens", 0),
                              "completion_tokens": usage.get("completion_tokens", 0)},
                    "seconds": seconds, "changed_files": changed_files,
                    "trajectory": str(trajectory) if trajectory else None})

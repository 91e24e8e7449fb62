"""Loop events (agent/events.py) → ACP ``session/update`` notifications.

- the model's words stream as ``agent_message_chunk``, its reasoning as ``agent_thought_chunk``; tool
  call markup is hidden as in the terminal (ui/stream.py): each call is shown once it is parsed;
- a tool call is a ``tool_call`` (kind, title, locations), ``pending`` while it may still be asked
  about, ``in_progress`` once it runs, then ``completed`` or ``failed`` with the observation the model
  read, and for file edits a diff (old and new text, from clientfs.WriteLog);
- a ``task`` call is a tool call for its subagent: ``in_progress`` when the child starts, its progress
  (step, what it is doing, tokens) streamed as the call's content, then its report;
- warnings and a stop that is not the model's own choice are said in the message, and ``finish``'s
  summary is the turn's last words.

Runs on the loop's worker thread; ``post`` queues an update for the client (outbox.py).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

from clovercode.front.acp.clientfs import WriteLog
from clovercode.front.acp.markdown import text_block
from clovercode.front.acp.output import LiveOutput
from clovercode.trust.markdown import EditorMarkdown
from clovercode.mcpservers.config import SEPARATOR
from clovercode.trust.paths import inside_project
from clovercode.ui.stream import StreamFilter

KINDS = {"view_file": "read", "list_files": "search", "search_text": "search", "edit_file": "edit",
         "write_file": "edit", "apply_patch": "edit", "run_command": "execute", "task": "think"}
ASKED_KINDS = ("edit", "execute", "other")  # may wait for a permission answer before they run
TITLE_CHARS = 200
PLAN_TOOL = "update_plan"  # shown as the editor's plan (a ``plan`` update), not as a tool call
PLAN_STATUSES = ("pending", "in_progress", "completed")
QUIET_STOPS = ("finished", "answered", "interrupted")  # the turn's end says itself (or was asked for)


def plan_update(steps: Any) -> dict[str, Any] | None:
    """The ACP ``plan`` update of the plan tool's steps; None when they are not a plan."""
    if not isinstance(steps, list) or not steps:
        return None
    entries = [{"content": str(item.get("step", "")), "priority": "medium", "status": item.get("status")}
               for item in steps if isinstance(item, dict)]
    if len(entries) != len(steps) or any(e["status"] not in PLAN_STATUSES or not e["content"] for e in entries):
        return None
    return {"sessionUpdate": "plan", "entries": entries}


def kind_of(name: str) -> str:
    if SEPARATOR in name:
        return "other"  # an MCP tool: clovercode cannot know what it does
    return KINDS.get(name, "other")


def title_of(name: str, arguments: dict[str, Any]) -> str:
    if name == "run_command":
        text = str(arguments.get("command", ""))
    elif name == "apply_patch":
        files = [line.split(":", 1)[1].strip() for line in str(arguments.get("patch", "")).splitlines()
                 if line.startswith(("*** Update File:", "*** Add File:", "*** Delete File:"))]
        text = "patch " + ", ".join(files) if files else "patch"
    elif name == "task":
        text = f"subagent: {arguments.get('description') or 'task'}"
    elif name in ("list_files", "search_text"):
        text = f"{name} {arguments.get('pattern') or ''} {arguments.get('path') or ''}".strip()
    elif "path" in arguments:
        text = f"{name} {arguments['path']}"
    else:
        text = name
    lines = text.splitlines() if text.strip() else [name]
    first = lines[0][:TITLE_CHARS] + ("…" if len(lines[0]) > TITLE_CHARS else "")
    # a title never passes for the whole command: the lines after the first are counted
    return first + (f" (+{len(lines) - 1} more lines)" if len(lines) > 1 else "")


def locations(root: Path, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """Where the call works, for the editor to follow: only paths inside the project (the model's
    path is text; one outside is refused by the tool and must not send the editor there either)."""
    given = arguments.get("path")
    if not isinstance(given, str) or not given.strip() or "\x00" in given:
        return []
    path = inside_project(root, Path(given.strip()).expanduser())
    if path is None:
        return []
    out: dict[str, Any] = {"path": str(path)}
    if isinstance(arguments.get("start_line"), int) and arguments["start_line"] >= 1:
        out["line"] = arguments["start_line"]
    return [out]


class UpdateMapper:
    """An EventSink for one prompt turn of one ACP session."""

    def __init__(self, root: Path, post: Callable[[dict[str, Any]], None], writes: WriteLog | None = None,
                 prefix: str = ""):
        self.root, self.post, self.writes = root, post, writes
        self.prefix = prefix  # the loop numbers calls per task; a session's calls need ids unique across tasks
        self.stream = StreamFilter()
        self.started: dict[str, str] = {}  # tool call id -> title, for the calls the client was told of
        self.lock = threading.Lock()
        self.current: tuple[str, str] | None = None  # the call being run (permission questions name it)
        self.last_format_error = ""  # an invalid call's error comes as its observation and as a format_error
        self.hidden: set[str] = set()  # plan tool calls: their plan is the update, not a tool call
        self.planned = False  # the model wrote a plan in this task (plan mode then asks to start on it)
        self.live_output = LiveOutput(post)
        self.children: dict[str, str] = {}  # a subagent's id -> the task call that runs it
        self.model_window: int | None = None  # tokens of the window the model counted in its last turn
        self.inert: dict[str, EditorMarkdown] = {}  # per kind of chunk: the Markdown made inert as it streams

    def emit(self, kind: str, **data: Any) -> None:
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(**data)

    def running(self) -> None:
        """The current call was allowed: it runs now."""
        if self.current is not None:
            self.post({"sessionUpdate": "tool_call_update", "toolCallId": self.current[0], "status": "in_progress"})

    def command_output(self, chunk: bytes) -> None:
        """A chunk of the running command's output (from the executor, on the worker thread)."""
        current = self.current
        if current is not None:
            self.live_output.feed(current[0], chunk)

    def _say(self, text: str, thought: bool = False, end: bool = False) -> None:
        # The model's Markdown, inert for the editor's renderer: no image is fetched, no HTML rendered
        # (trust/markdown.py); what a chunk leaves undecided goes out with the next one, or at the end.
        kind = "agent_thought_chunk" if thought else "agent_message_chunk"
        inert = self.inert.setdefault(kind, EditorMarkdown())
        text = inert.feed(text) + (inert.flush() if end else "")
        if text:
            self.post({"sessionUpdate": kind, "content": {"type": "text", "text": text}})

    def _end_text(self) -> None:
        for thought in (True, False):
            self._say("", thought=thought, end=True)

    def _on_step_start(self, **_: Any) -> None:
        self.stream = StreamFilter()

    def _on_text_delta(self, text: str, reasoning: bool = False, **_: Any) -> None:
        segments = [("reasoning", text)] if reasoning else self.stream.feed(text)
        for kind, part in segments:
            self._say(part, thought=kind == "reasoning")

    def _on_model_turn(self, usage: dict[str, Any] | None = None, **_: Any) -> None:
        # the window the model itself counted for this turn (its prompt and what it wrote), for usage_update
        counted = (usage or {}).get("prompt_tokens")
        if isinstance(counted, int) and counted > 0 and not (usage or {}).get("usage_estimated"):
            self.model_window = counted + int((usage or {}).get("completion_tokens") or 0)
        for kind, part in self.stream.flush():
            self._say(part, thought=kind == "reasoning")
        self._end_text()

    def _on_plan(self, steps: Any = None, **_: Any) -> None:
        update = plan_update(steps)
        if update is not None:
            self.planned = True
            self.post(update)

    def _on_tool_call(self, id: str, name: str, arguments: dict[str, Any], **_: Any) -> None:
        id = self.prefix + id
        if name == PLAN_TOOL:
            self.hidden.add(id)
            return
        kind, title = kind_of(name), title_of(name, arguments)
        self.started[id] = title
        self.current = (id, title)
        if self.writes is not None:
            self.writes.take()  # what an earlier call wrote is not this call's
        self.post({"sessionUpdate": "tool_call", "toolCallId": id, "title": title, "kind": kind,
                   "status": "pending" if kind in ASKED_KINDS else "in_progress",
                   "locations": locations(self.root, arguments), "rawInput": arguments})

    def _on_observation(self, id: str, ok: bool, text: str, data: dict[str, Any], **_: Any) -> None:
        id = self.prefix + id
        if id in self.hidden:
            self.hidden.discard(id)
            if not ok:
                self._on_format_error(text)  # a plan the tool refused: said among the reasoning
            return
        if id not in self.started:
            self._on_format_error(text)  # an invalid call never started: said once, among the reasoning
            return
        self.current = None
        self.live_output.end()  # before the final update: a late partial one must not replace it
        content: list[dict[str, Any]] = []
        for written in (self.writes.take() if self.writes is not None else []):
            diff: dict[str, Any] = {"type": "diff", "path": str(written.path), "newText": written.new_text}
            if written.old_text is not None:
                diff["oldText"] = written.old_text
            content.append(diff)
        if text:
            content.append(text_block(text))
        self.post({"sessionUpdate": "tool_call_update", "toolCallId": id, "status": "completed" if ok else "failed",
                   "content": content, **({"rawOutput": {"exit_code": data["exit_code"]}} if "exit_code" in data else {})})

    def _on_subagent_started(self, call_id: str, child_id: str, **_: Any) -> None:
        self.children[child_id] = self.prefix + call_id
        self.post({"sessionUpdate": "tool_call_update", "toolCallId": self.prefix + call_id, "status": "in_progress",
                   "rawOutput": {"subagent": child_id}})

    def _on_subagent_progress(self, child_id: str, step: int, status: str, tokens: int, **_: Any) -> None:
        call = self.children.get(child_id)
        if call is not None:
            line = f"step {step} · {status} · {tokens} tokens"
            self.post({"sessionUpdate": "tool_call_update", "toolCallId": call,
                       "content": [{"type": "content", "content": {"type": "text", "text": line}}]})

    def _on_format_error(self, text: str | None = None, **_: Any) -> None:
        """A call that could not run (malformed, unknown tool): the model is told why; the person sees
        it among the reasoning, as the REPL shows it dimly, not as a tool call that never started."""
        first = (text or "invalid tool call").splitlines()[0]
        if first != self.last_format_error:
            self.last_format_error = first
            self._say(f"\n⚠ {first}\n", thought=True)

    def _on_warning(self, text: str, quiet: bool = False, **_: Any) -> None:
        if not quiet:
            self._say(f"\n⚠ {text}\n")

    def _on_run_end(self, stop_reason: str, detail: str, summary: str | None = None, **_: Any) -> None:
        for kind, part in self.stream.flush():
            self._say(part, thought=kind == "reasoning")
        if stop_reason == "finished" and summary:
            self._say(summary)
        elif stop_reason not in QUIET_STOPS:
            self._say(f"\n■ stopped: {detail}\n")
        self._end_text()

"""Hooks around the toolbox and the stop decision (the design's seam: they see events, not the loop).

- pre_tool_use: exit 2 blocks the call; the hook's stderr is the reason the model receives.
- post_tool_use: exit 2 feeds the hook's stderr back to the model with the tool's output
  (a linter's complaints); a hook that changed the file the tool touched is pointed out.
- stop: exit 2 sends the model back to work with the hook's stderr, at most ``max_stop_blocks``
  times in one run.
Any other exit code, a timeout or a hook that cannot start is a warning; the run goes on.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping, Sequence

from clovercode.actions.context import Observation
from clovercode.ground.events import EventSink
from clovercode.hooks.config import HookConfig
from clovercode.hooks.runner import HookResult, run_hook
from clovercode.trust.projectview import ProjectView


class Hooks:
    def __init__(self, hooks: Sequence[HookConfig], root: Path, env: Mapping[str, str] | None = None,
                 sink: EventSink | None = None, max_stop_blocks: int = 3):
        self.hooks, self.root, self.env, self.sink = list(hooks), root, env, sink
        self.max_stop_blocks = max_stop_blocks
        self.stop_blocks = 0

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def before(self, tool: str, arguments: dict[str, Any]) -> str | None:
        """The reason to give the model when a pre_tool_use hook blocks the call, else None."""
        event = self._event("pre_tool_use", tool_name=tool, tool_input=arguments)
        for hook in self._matching("pre_tool_use", tool):
            result = self._run(hook, event)
            if result.blocked:
                reason = result.message or "no reason given"
                return f"Not run: a pre_tool_use hook blocked this call of `{tool}`:\n{reason}"
        return None

    def after(self, tool: str, arguments: dict[str, Any], observation: Observation) -> Observation:
        hooks = self._matching("post_tool_use", tool)
        if not hooks:
            return observation
        touched = self._file_of(arguments)
        before = self._digest(touched)
        event = self._event("post_tool_use", tool_name=tool, tool_input=arguments,
                            tool_response={"ok": observation.ok, "output": observation.text})
        notes = []
        for hook in hooks:
            result = self._run(hook, event)
            if result.blocked and result.message:
                notes.append(f"[post_tool_use hook `{hook.command}`]\n{result.message}")
        if touched is not None and self._digest(touched) != before:
            shown = touched.relative_to(self.root) if touched.is_relative_to(self.root) else touched
            notes.append(f"[note] a post_tool_use hook changed {shown} after this call; view it before editing it again.")
        if not notes:
            return observation
        return Observation(observation.ok, observation.text + "\n\n" + "\n\n".join(notes), observation.data)

    def review_stop(self, reason: str, summary: str | None, changed: Sequence[str]) -> str | None:
        """Feedback that sends the model back to work when a stop hook objects, else None."""
        hooks = [h for h in self.hooks if h.event == "stop"]
        if not hooks:
            return None
        event = self._event("stop", stop_reason=reason, summary=summary, changed_files=list(changed),
                            stop_hook_active=self.stop_blocks > 0)
        for hook in hooks:
            result = self._run(hook, event)
            if not result.blocked:
                continue
            if self.stop_blocks >= self.max_stop_blocks:
                times = "once" if self.stop_blocks == 1 else f"{self.stop_blocks} times"
                self._warn(f"a stop hook objected again, but it already sent the model back {times} "
                           f"(hooks.max_stop_blocks); stopping anyway")
                return None
            self.stop_blocks += 1
            return (f"You may not stop yet: a stop hook (`{hook.command}`) objected:\n"
                    f"{result.message or 'no reason given'}\nKeep working on the task, then finish again.")
        return None

    # --- helpers ---

    def _matching(self, event: str, tool: str) -> list[HookConfig]:
        return [h for h in self.hooks if h.event == event and h.matches(tool)]

    def _event(self, name: str, **fields: Any) -> dict[str, Any]:
        return {"hook_event_name": name, "cwd": str(self.root), **fields}

    def _run(self, hook: HookConfig, event: dict[str, Any]) -> HookResult:
        result = run_hook(hook, event, self.root, self.env)
        if self.sink is not None:
            self.sink.emit("hook", event=hook.event, command=hook.command, exit_code=result.exit_code,
                           blocked=result.blocked, timed_out=result.timed_out, seconds=round(result.seconds, 3),
                           output=result.message[-2000:])
        if result.failed:
            self._warn(result.problem())
        return result

    def _warn(self, text: str) -> None:
        if self.sink is not None:
            self.sink.emit("warning", text=text, category="hook")

    def _file_of(self, arguments: dict[str, Any]) -> Path | None:
        path = arguments.get("path")
        if not isinstance(path, str) or not path:
            return None
        view = ProjectView(self.root)  # the model's path: a link out (or /etc/shadow) is not read, not even hashed
        candidate = view.find(path)
        return candidate if candidate is not None and view.kind(candidate) == "file" else None

    def _digest(self, path: Path | None) -> str | None:
        if path is None:
            return None
        try:
            return hashlib.sha256(ProjectView(self.root).read_bytes(path)).hexdigest()
        except OSError:
            return None

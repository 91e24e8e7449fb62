"""The toolbox: tool specs from ``tools/`` and from tool sources (MCP servers) joined to their
handlers; runs validated calls, wrapped by hooks when there are any."""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from clovercode.actions import commands, editing, files, patching, plan
from clovercode.actions.context import Observation, ToolContext, ToolError
from clovercode.toolcalls.schemas import ToolSpec, load_tool_specs
from clovercode.toolcalls.validate import CheckedCall, Validator

Handler = Callable[[ToolContext, dict[str, Any]], Observation]

FINISH = "finish"  # handled by the loop: it ends the run

HANDLERS: dict[str, Handler] = {
    "view_file": files.view_file,
    "list_files": files.list_files,
    "search_text": files.search_text,
    "edit_file": editing.edit_file,
    "write_file": editing.write_file,
    "apply_patch": patching.apply_patch,
    "run_command": commands.run_command,
    "update_plan": plan.update_plan,
}


class ToolSource(Protocol):
    """More tools, e.g. an MCP server's. ``revision`` changes whenever ``tools()`` does."""

    revision: int

    def tools(self) -> list[tuple[ToolSpec, Handler]]: ...


class ToolHooks(Protocol):
    """What wraps each call and the model's wish to stop (clovercode/hooks)."""

    def before(self, tool: str, arguments: dict[str, Any]) -> str | None: ...

    def after(self, tool: str, arguments: dict[str, Any], observation: Observation) -> Observation: ...

    def review_stop(self, reason: str, summary: str | None, changed: Sequence[str]) -> str | None: ...


class Toolbox:
    def __init__(self, ctx: ToolContext, specs: Sequence[ToolSpec] | None = None,
                 handlers: dict[str, Handler] | None = None, *, sources: Sequence[ToolSource] = (),
                 hooks: ToolHooks | None = None):
        self.ctx = ctx
        self.handlers = dict(HANDLERS if handlers is None else handlers)
        self.builtin_specs = list(specs) if specs is not None else load_tool_specs()
        self.sources, self.hooks = list(sources), hooks
        missing = [s.name for s in self.builtin_specs if s.name != FINISH and s.name not in self.handlers]
        if missing:
            raise RuntimeError(f"tools without a handler: {', '.join(missing)}")
        self._joined: tuple[tuple[int, ...], list[ToolSpec], dict[str, Handler], Validator | None] | None = None

    def _join(self) -> tuple[list[ToolSpec], dict[str, Handler]]:
        revisions = tuple(s.revision for s in self.sources)
        if self._joined is None or self._joined[0] != revisions:
            specs, handlers = list(self.builtin_specs), {}
            names = {s.name for s in specs}
            for source in self.sources:
                for spec, handler in source.tools():
                    if spec.name not in names:  # a built-in tool is never shadowed
                        names.add(spec.name)
                        specs.append(spec)
                        handlers[spec.name] = handler
            self._joined = (revisions, specs, handlers, None)
        return self._joined[1], self._joined[2]

    @property
    def specs(self) -> list[ToolSpec]:
        """Every tool the model can call now (a server's list can change between steps)."""
        return self._join()[0]

    def take_notes(self) -> list[tuple[str, str, bool]]:
        """What the tool sources have to say since the last call (an MCP server ready, failed, a tool
        left out): (category, text, quiet)."""
        notes: list[tuple[str, str, bool]] = []
        for source in self.sources:
            take = getattr(source, "take_notes", None)
            if take is not None:
                notes.extend(take())
        return notes

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    def validator(self) -> Validator:
        self._join()
        assert self._joined is not None
        if self._joined[3] is None:
            starting = {prefix: server for source in self.sources
                        for prefix, server in getattr(source, "starting_prefixes", dict)().items()}
            self._joined = (*self._joined[:3], Validator(self._joined[1], starting))
        return self._joined[3]  # type: ignore[return-value]

    def execute(self, call: CheckedCall) -> Observation:
        if self.hooks is not None:
            reason = self.hooks.before(call.name, call.arguments)
            if reason is not None:
                return Observation(False, reason, {"blocked_by": "pre_tool_use"})
        observation = self._run(call)
        if self.hooks is not None:
            observation = self.hooks.after(call.name, call.arguments, observation)
        return observation

    def review_stop(self, reason: str, summary: str | None) -> str | None:
        """Feedback when a stop hook sends the model back to work, else None (stop)."""
        if self.hooks is None:
            return None
        return self.hooks.review_stop(reason, summary, sorted(self.ctx.changed))

    def _run(self, call: CheckedCall) -> Observation:
        handler = self.handlers.get(call.name) or self._join()[1].get(call.name)
        if handler is None:
            return Observation(False, f"Error: the tool `{call.name}` is no longer available (its MCP server removed it).")
        try:
            return handler(self.ctx, call.arguments)
        except ToolError as exc:
            return Observation(False, f"Error: {exc}")
        except OSError as exc:
            return Observation(False, f"Error: {call.name} failed: {exc.strerror or exc}")

"""The toolbox: tool specs from ``tools/`` joined to their handlers; runs validated calls."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from clovercode.actions import commands, editing, files, patching
from clovercode.actions.context import Observation, ToolContext, ToolError
from clovercode.toolcalls.schemas import ToolSpec, load_tool_specs
from clovercode.toolcalls.validate import CheckedCall

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
}


class Toolbox:
    def __init__(self, ctx: ToolContext, specs: Sequence[ToolSpec] | None = None,
                 handlers: dict[str, Handler] | None = None):
        self.ctx = ctx
        self.handlers = dict(HANDLERS if handlers is None else handlers)
        self.specs = list(specs) if specs is not None else load_tool_specs()
        missing = [s.name for s in self.specs if s.name != FINISH and s.name not in self.handlers]
        if missing:
            raise RuntimeError(f"tools without a handler: {', '.join(missing)}")

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    def execute(self, call: CheckedCall) -> Observation:
        try:
            return self.handlers[call.name](self.ctx, call.arguments)
        except ToolError as exc:
            return Observation(False, f"Error: {exc}")
        except OSError as exc:
            return Observation(False, f"Error: {call.name} failed: {exc.strerror or exc}")

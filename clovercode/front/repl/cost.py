"""/cost: what this REPL session has used, as eval reports it: tokens in and out, time, and how the
time splits between the model and the tools (an EventSink that counts the loop's events)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clovercode.front.repl.app import Repl


class CostMeter:
    def __init__(self) -> None:
        self.turns = self.calls = self.prompt_tokens = self.completion_tokens = 0
        self.model_seconds = self.tool_seconds = 0.0
        self.estimated = False

    def emit(self, kind: str, **data: Any) -> None:
        if kind == "model_turn":
            usage = data.get("usage") or {}
            self.turns += 1
            self.prompt_tokens += int(usage.get("prompt_tokens", 0))
            self.completion_tokens += int(usage.get("completion_tokens", 0))
            self.estimated = self.estimated or bool(usage.get("usage_estimated"))
            self.model_seconds += float(data.get("seconds") or 0.0)
        elif kind == "observation":
            self.calls += 1
            self.tool_seconds += float(data.get("seconds") or 0.0)

    def lines(self) -> list[str]:
        about = "~" if self.estimated else ""
        total = self.model_seconds + self.tool_seconds
        return [f"tokens: {about}{self.prompt_tokens} in · {about}{self.completion_tokens} out "
                f"({self.turns} model turn{'' if self.turns == 1 else 's'})",
                f"time: {total:.1f} s · model {self.model_seconds:.1f} s · tools {self.tool_seconds:.1f} s "
                f"({self.calls} call{'' if self.calls == 1 else 's'})"]


def cost_command(repl: "Repl", _: str) -> bool:
    for line in repl.cost.lines():
        repl.console.print(line, highlight=False, markup=False)
    return True

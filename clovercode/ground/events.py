"""Loop events fan out to sinks: the console renderer, the trajectory writer, tests. Ground floor: the
agent emits them, and the context, hooks and backends below it speak them too, so they live here.

Kinds (each with keyword data): run_start, step_start, text_delta, model_turn, tool_call,
observation, format_error, warning (``category``: what it is about, exec --json's warning categories;
``quiet=True``: said dimly, e.g. a fallback the endpoint took), hook (a hook ran: docs/mcp-and-hooks.md),
run_end. See docs/architecture.md.
"""

from __future__ import annotations

from typing import Any, Protocol

# a child's or an attempt's live line; its own trajectory has the detail
SKIPPED_KINDS = {"text_delta", "subagent_progress", "attempt_progress"}
# Every kind a trajectory may hold besides ``model_turn``: a replay skips these and refuses any other
# kind, so a typo'd or foreign line is an error rather than a silently dropped turn. A new event kind
# must be added here (tests/test_trajectory.py checks every kind the code emits is listed).
NON_TURN_KINDS = frozenset({"run_start", "step_start", "tool_call", "observation", "format_error", "warning",
                            "context", "conversation", "run_end", "test_run", "fix_result", "hook", "plan",
                            "subagent_started", "subagent_progress", "subagent_completed",
                            "clean_run",  # fix: the commit tested alone (fixflow/cleanrun.py)
                            # fix --attempts N (front/fixattempts.py; progress: the REPL's rows)
                            "attempt_started", "attempt_progress", "attempt_completed"})


class EventSink(Protocol):
    def emit(self, kind: str, **data: Any) -> None:
        ...


class MultiSink:
    def __init__(self, *sinks: EventSink):
        self.sinks = [s for s in sinks if s is not None]

    def emit(self, kind: str, **data: Any) -> None:
        for sink in self.sinks:
            sink.emit(kind, **data)


class RecordingSink:
    """Keeps every event; handy for tests and for summaries."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def emit(self, kind: str, **data: Any) -> None:
        self.events.append((kind, data))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [data for k, data in self.events if k == kind]

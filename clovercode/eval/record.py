"""What the eval adds to a run: a backend wrapper that times the model alone, and a sink that keeps
every loop event with its time (the trajectory the metrics are computed from)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from clovercode.ground.messages import Message
from clovercode.backends.base import Event, GenerationParams, ModelBackend, TextDelta, ToolCallEvent, Usage
from clovercode.toolcalls.schemas import ToolSpec


@dataclass
class TurnTiming:
    """Time spent inside the backend for one turn; updated as events arrive, so it is complete when
    the loop reports the turn even if the loop stops iterating right after ``Finish``."""

    model_seconds: float = 0.0
    first_token_seconds: float | None = None
    engine_seconds: float | None = None  # what the backend itself reported (Usage.seconds)


class TimedBackend:
    """Wraps a backend and measures only the time spent producing its events, not the time the loop
    spends between them (rendering, sinks), so model time and harness time can be told apart."""

    def __init__(self, inner: ModelBackend, clock: Callable[[], float]):
        self.inner, self.clock = inner, clock
        self.name = inner.name
        self.current: TurnTiming | None = None

    def __getattr__(self, name: str) -> Any:  # optional extras: count_tokens, context_window, ...
        return getattr(self.inner, name)

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        timing = self.current = TurnTiming()
        iterator = iter(self.inner.generate(messages, tools, params))
        try:
            while True:
                started = self.clock()
                try:
                    event = next(iterator)
                except StopIteration:
                    timing.model_seconds += self.clock() - started
                    return
                timing.model_seconds += self.clock() - started
                if timing.first_token_seconds is None and isinstance(event, (TextDelta, ToolCallEvent)):
                    timing.first_token_seconds = timing.model_seconds
                if isinstance(event, Usage) and event.seconds > 0:
                    timing.engine_seconds = event.seconds
                yield event
        finally:  # the loop closed this stream early (a reply that looped): stop the model too
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    def close(self) -> None:
        self.inner.close()


class EventRecorder:
    """An EventSink keeping each event (but streamed text) as a JSON-safe dict with ``t``, seconds
    since the recorder was made; model turns also get the backend timing of that turn."""

    SKIPPED = {"text_delta"}

    def __init__(self, clock: Callable[[], float], timer: TimedBackend | None = None):
        self.clock, self.timer = clock, timer
        self.started = clock()
        self.events: list[dict[str, Any]] = []

    def emit(self, kind: str, **data: Any) -> None:
        if kind in self.SKIPPED:
            return
        record: dict[str, Any] = {"kind": kind, "t": round(self.clock() - self.started, 6), **data}
        if kind == "model_turn" and self.timer is not None and self.timer.current is not None:
            timing = self.timer.current
            record["timing"] = {"model_seconds": round(timing.model_seconds, 6),
                                "first_token_seconds": _round(timing.first_token_seconds),
                                "engine_seconds": _round(timing.engine_seconds)}
        self.events.append(json.loads(json.dumps(record, ensure_ascii=False, default=str)))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)

"""Run limits, stop reasons, and detection of the same failing call made again and again."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any


class StopReason(str, enum.Enum):
    FINISHED = "finished"  # the model called finish
    ANSWERED = "answered"  # interactive: the model replied without a tool call
    MAX_STEPS = "max_steps"
    MAX_TIME = "max_time"
    MAX_TOKENS = "max_tokens"
    FORMAT_ERRORS = "format_errors"  # too many consecutive unparseable / invalid turns
    REPEATED_FAILURES = "repeated_failures"  # the same failing call, again and again
    INTERRUPTED = "interrupted"
    MODEL_ERROR = "model_error"

    @property
    def gave_up(self) -> bool:
        return self in (StopReason.MAX_STEPS, StopReason.MAX_TIME, StopReason.MAX_TOKENS,
                        StopReason.FORMAT_ERRORS, StopReason.REPEATED_FAILURES)


@dataclass(frozen=True)
class Limits:
    max_steps: int = 30
    max_time: float = 0.0  # seconds; 0 means none
    max_tokens: int = 0  # 0 means none
    max_format_errors: int = 3
    max_repeats: int = 3
    repetition_window: int = 1000  # characters; 0 turns the loop guard off (agent/repetition.py)

    @staticmethod
    def from_config(cfg: Any) -> "Limits":
        return Limits(cfg["max_steps"], cfg["max_time"], cfg["max_tokens"], cfg["max_format_errors"], cfg["max_repeats"],
                      cfg["repetition_window"])


@dataclass
class RepeatTracker:
    """Counts identical failing calls (same tool, same arguments, same error)."""

    limit: int
    counts: dict[str, int] = field(default_factory=dict)

    def record_failure(self, name: str, arguments: dict[str, Any], error: str) -> int:
        key = json.dumps([name, arguments, error], sort_keys=True, ensure_ascii=False, default=str)
        self.counts[key] = self.counts.get(key, 0) + 1
        return self.counts[key]

    def warning(self, count: int) -> str | None:
        if count == self.limit - 1:
            return (f"You have made this exact call {count} times and it failed the same way each time. "
                    "Do something different: read the relevant file, change the arguments, or try another approach. "
                    "One more identical attempt stops the run.")
        return None

    def exhausted(self, count: int) -> bool:
        return count >= self.limit

"""Replay backend: plays recorded assistant turns from a JSON Lines file, in order.

Accepted lines (blank lines ignored):
  {"text": "<raw assistant text>", "usage": {"prompt_tokens": 0, "completion_tokens": 0}}   a replay turn
      (usage may also carry "forwards" and "seconds", the engine figures of the recorded turn)
  {"kind": "model_turn", "raw": "...", ...}     a trajectory event: trajectories replay directly
Other trajectory events are skipped, so ``--model replay:TRAJECTORY.jsonl`` reproduces a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from clovercode.agent.messages import Message
from clovercode.agent.trajectory import turn_text
from clovercode.backends.base import Event, Finish, GenerationParams, ModelError, TextDelta, Usage
from clovercode.context.tokens import estimate_prompt_tokens, estimate_tokens
from clovercode.errors import ModelUnavailable
from clovercode.jsonl import json_objects
from clovercode.toolcalls.schemas import ToolSpec

USAGE_KEYS = ("prompt_tokens", "completion_tokens", "forwards", "seconds")
CHUNK = 24  # characters per streamed delta, so replays exercise streaming like a real model


@dataclass(frozen=True)
class ReplayTurn:
    text: str
    usage: dict[str, Any]


def load_replay(path: Path) -> list[ReplayTurn]:
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelUnavailable(f"replay file not found: {path}", hint="Pass --model replay:PATH to a JSON Lines file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelUnavailable(f"replay file {path} cannot be read: {exc}") from None
    turns = []
    for number, obj in json_objects(source, str(path), ModelUnavailable):
        if "text" in obj:
            text = obj["text"]
        elif obj.get("kind") == "model_turn":
            text = turn_text(obj)  # with the calls an endpoint parsed, which are not in "raw"
        else:
            continue
        if not isinstance(text, str):
            raise ModelUnavailable(f"{path}:{number}: \"text\" must be a string")
        usage = obj.get("usage") or {}
        if isinstance(usage, dict):  # a trajectory writes "forwards": null for backends that do not count them
            usage = {key: value for key, value in usage.items() if value is not None}
        if not isinstance(usage, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in usage.items() if k in USAGE_KEYS):
            raise ModelUnavailable(f"{path}:{number}: \"usage\" must be an object of numbers ({', '.join(USAGE_KEYS)})")
        turns.append(ReplayTurn(text, usage))
    if not turns:
        raise ModelUnavailable(f"replay file {path} holds no assistant turns")
    return turns


class ReplayBackend:
    def __init__(self, path: Path):
        self.path = path
        self.turns = load_replay(path)
        self.position = 0
        self.name = f"replay:{path}"

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        if self.position >= len(self.turns):
            raise ModelError(f"the replay {self.path} has no more turns (all {len(self.turns)} were played)")
        turn = self.turns[self.position]
        self.position += 1
        for start in range(0, len(turn.text), CHUNK):
            yield TextDelta(turn.text[start:start + CHUNK])
        usage = turn.usage
        # Engine figures recorded with the turn (forwards, seconds) replay too, so a recorded
        # engine run reproduces its tokens-per-forward in `clovercode eval`.
        yield Usage(prompt_tokens=int(usage.get("prompt_tokens", estimate_prompt_tokens(messages, tools))),
                    completion_tokens=int(usage.get("completion_tokens", max(1, estimate_tokens(turn.text)))),
                    forwards=int(usage["forwards"]) if usage.get("forwards") else None,
                    seconds=float(usage.get("seconds") or 0.0))
        yield Finish("stop")

    def close(self) -> None:
        pass

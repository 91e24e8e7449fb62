"""Replay backend: plays recorded assistant turns from a JSON Lines file, in order.

Accepted lines (blank lines ignored):
  {"text": "<raw assistant text>", "usage": {"prompt_tokens": 0, "completion_tokens": 0}}   a replay turn
      (usage may also carry "forwards" and "seconds", the engine figures of the recorded turn;
      an optional "agent": "DESCRIPTION" gives the turn to the subagent with that task description,
      in order: the main agent plays the turns without one, so one file scripts parent and children)
  {"kind": "model_turn", "raw": "...", ...}     a trajectory event: trajectories replay directly
The trajectory's other events (observations, warnings, test runs …) are not model turns and are
skipped, so ``--model replay:TRAJECTORY.jsonl`` plays exactly the recorded turns. Any other shape —
an unknown key, an unknown event kind — is an error naming the file and line: a replay that silently
dropped or invented a turn would reproduce a different run. The events file of a ``fix --attempts``
run holds no turn of its own: it replays the attempt that run chose (ground/attemptlog.py).
"""

from __future__ import annotations

import difflib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from clovercode.ground.messages import Message
from clovercode.backends.base import Event, Finish, GenerationParams, ModelError, TextDelta, Usage
from clovercode.context.tokens import estimate_prompt_tokens, estimate_tokens
from clovercode.ground.attemptlog import published_attempt
from clovercode.ground.errors import ModelUnavailable
from clovercode.ground.events import NON_TURN_KINDS
from clovercode.ground.jsonl import json_objects
from clovercode.toolcalls.render import render_call
from clovercode.toolcalls.schemas import ToolSpec

USAGE_KEYS = ("prompt_tokens", "completion_tokens", "forwards", "seconds")
TURN_KEYS = ("text", "usage", "agent")
CHUNK = 24  # characters per streamed delta, so replays exercise streaming like a real model


@dataclass(frozen=True)
class ReplayTurn:
    text: str
    usage: dict[str, Any]
    agent: str | None = None  # the subagent (its task description) this turn belongs to; None: the main agent


def load_replay(path: Path) -> list[ReplayTurn]:
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelUnavailable(f"replay file not found: {path}", hint="Pass --model replay:PATH to a JSON Lines file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelUnavailable(f"replay file {path} cannot be read: {exc}") from None
    turns = []
    for number, obj in json_objects(source, str(path), ModelUnavailable):
        where = f"{path}:{number}"
        if "kind" in obj:
            kind = obj["kind"]
            if kind in NON_TURN_KINDS:
                continue
            if kind != "model_turn":
                raise ModelUnavailable(f"{where}: unknown trajectory event kind {kind!r}{_suggest(kind, ['model_turn', *NON_TURN_KINDS])}",
                                       hint=LINE_SHAPES)
            if not isinstance(obj.get("raw"), str):
                raise ModelUnavailable(f"{where}: a model_turn needs \"raw\", the text the model wrote", hint=LINE_SHAPES)
            text = turn_text(obj)  # with the calls an endpoint parsed, which are not in "raw"
        else:
            unknown = sorted(set(obj) - set(TURN_KEYS))
            if unknown:
                raise ModelUnavailable(f"{where}: unknown key {unknown[0]!r}{_suggest(unknown[0], [*TURN_KEYS, 'kind'])} "
                                       "in a replay turn", hint=LINE_SHAPES)
            if "text" not in obj:
                raise ModelUnavailable(f"{where}: a replay turn needs \"text\"", hint=LINE_SHAPES)
            text = obj["text"]
        if not isinstance(text, str):
            raise ModelUnavailable(f"{where}: \"text\" must be a string")
        usage = obj.get("usage") or {}
        if isinstance(usage, dict):  # a trajectory writes "forwards": null for backends that do not count them
            usage = {key: value for key, value in usage.items() if value is not None}
        if not isinstance(usage, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in usage.items() if k in USAGE_KEYS):
            raise ModelUnavailable(f"{path}:{number}: \"usage\" must be an object of numbers ({', '.join(USAGE_KEYS)})")
        agent = obj.get("agent") if "kind" not in obj else None
        if agent is not None and not isinstance(agent, str):
            raise ModelUnavailable(f"{where}: \"agent\" must be a string (a subagent's task description)")
        turns.append(ReplayTurn(text, usage, agent))
    if not turns:
        nested = published_attempt(path)
        if nested is not None:  # a `fix --attempts` run's events file: its chosen attempt's turns
            return load_replay(nested)
        raise ModelUnavailable(f"replay file {path} holds no assistant turns")
    return turns


LINE_SHAPES = ('Each line is a replay turn {"text": ..., "usage": {...}} or a trajectory event {"kind": ...} '
               "(as clovercode writes them; `clovercode trajectory to-replay` converts a trajectory).")


def _suggest(word: object, choices: list[str]) -> str:
    close = difflib.get_close_matches(str(word), choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class ReplayBackend:
    def __init__(self, path: Path, turns: list[ReplayTurn] | None = None, agent: str | None = None):
        self.path, self.agent = path, agent
        every = load_replay(path) if turns is None else turns
        self.turns = [turn for turn in every if turn.agent == agent]
        self.others = [turn for turn in every if turn.agent != agent] if agent is None else []
        self.position = 0
        self.name = f"replay:{path}"
        self._lock = threading.Lock()
        self._children: dict[str, ReplayBackend] = {}

    def for_agent(self, label: str) -> "ReplayBackend":
        """The turns scripted for the subagent ``label`` (one queue per label, shared by its children)."""
        with self._lock:
            if label not in self._children:
                self._children[label] = ReplayBackend(self.path, self.others, label)
            return self._children[label]

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        with self._lock:
            position = self.position
            self.position += 1
        if position >= len(self.turns):
            whose = f" for the subagent {self.agent!r}" if self.agent is not None else ""
            raise ModelError(f"the replay {self.path} has no more turns{whose} (all {len(self.turns)} were played)")
        turn = self.turns[position]
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


def turn_text(event: dict[str, Any]) -> str:
    """A ``model_turn``'s text as a replay plays it: the raw text, then the calls a server parsed
    out of it (they are not in ``raw``), written in the XML form the parser reads."""
    calls = [render_call(c["name"], c.get("arguments") or {}) for c in event.get("server_calls") or ()]
    return "\n".join([event.get("raw", ""), *calls]) if calls else event.get("raw", "")

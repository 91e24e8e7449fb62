"""Generated text → what an OpenAI client gets: reasoning, content and tool calls.

Streaming and non-streaming replies go through the same :class:`ReplySplitter`, so both carry the
same result. Reasoning (``<think>…</think>``) streams as ``reasoning_content``; prose streams as
``content``; from the first tool call on, text is held back and parsed when generation ends. A
call that does not parse is returned as plain content, so a client with its own parser (clovercode's
endpoint backend) sees exactly what the model wrote and can tell the model what was wrong.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field, replace
from typing import Any

from clovercode.backends.base import Finish, TextDelta, ToolCallEvent, Usage
from clovercode.toolcalls.parser import THINK_CLOSE, THINK_OPEN, TOOL_OPEN, ParsedCall, parse_turn
from clovercode.toolcalls.tagscan import TagScanner

CALL_OPENERS = (TOOL_OPEN, "<function=")


@dataclass
class Reply:
    """The whole reply, for non-streaming responses."""

    content: str = ""
    reasoning: str = ""
    calls: list[ParsedCall] = field(default_factory=list)


class ReplySplitter:
    def __init__(self, parse_tools: bool, offered: frozenset[str] | None = None):
        self.parse_tools = parse_tools
        # The tools the client offered: a call to any other is no call (an allowlist; the grammar
        # already keeps the engine to these, this holds for any backend behind serve).
        self.offered = offered
        self.mode = "start"  # start (only whitespace so far) | reasoning | content | held
        self.scanner = TagScanner()
        self.held = ""

    def feed(self, text: str, reasoning: bool = False) -> list[tuple[str, str]]:
        """(kind, text) segments ready to send now; kind is "content" or "reasoning"."""
        if reasoning:  # the backend already separated it
            return [("reasoning", text)] if text else []
        out: list[tuple[str, str]] = []
        if self.mode == "held":
            self.held += text
            return out
        self.scanner.feed(text)
        while (token := self.scanner.take(self._tags())) is not None:
            kind, value = token
            if kind == "text":
                self._emit(out, value)
                continue
            self._switch(value)
            if self.mode == "held":  # the opener is part of the call text
                self.held += value + self.scanner.drain()
                break
        return out

    def finish(self) -> tuple[list[tuple[str, str]], list[ParsedCall]]:
        """The last segments and the parsed tool calls, once generation has ended."""
        out: list[tuple[str, str]] = []
        pending = self.scanner.drain()
        if self.mode != "held":
            self._emit(out, pending)
            return out, []
        held = self.held + pending
        turn = parse_turn(held)
        if turn.errors or not turn.calls or (self.offered is not None
                                             and any(c.name not in self.offered for c in turn.calls)):
            out.append(("content", held))
            return out, []
        if turn.content:
            out.append(("content", turn.content))
        return out, turn.calls

    def _tags(self) -> tuple[str, ...]:
        calls = CALL_OPENERS if self.parse_tools else ()
        if self.mode == "reasoning":
            return (THINK_CLOSE, *calls)
        if self.mode == "start":
            return (THINK_OPEN, THINK_CLOSE, *calls)
        return (THINK_CLOSE, *calls)

    def _switch(self, tag: str) -> None:
        if tag in CALL_OPENERS:
            self.mode = "held"
        elif tag == THINK_OPEN:
            self.mode = "reasoning"
        else:
            # "</think>" after reasoning; or in prose when the template opened <think> in the prompt,
            # in which case what streamed as content was reasoning: the stray tag is dropped.
            self.mode = "start"

    def _emit(self, out: list[tuple[str, str]], text: str) -> None:
        if not text:
            return
        if self.mode == "start":
            text = text.lstrip()
            if not text:
                return
            self.mode = "content"
        kind = "reasoning" if self.mode == "reasoning" else "content"
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))


def collect(segments: list[tuple[str, str]], reply: Reply) -> None:
    for kind, text in segments:
        if kind == "reasoning":
            reply.reasoning += text
        else:
            reply.content += text


class StopTrimmer:
    """Cuts the text at the first stop sequence (OpenAI: the returned text does not contain it).
    Text that could still be the start of a stop sequence is held back until it no longer can."""

    def __init__(self, stops: tuple[str, ...] = ()):
        self.stops = tuple(s for s in stops if s)
        self.pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        if not self.stops:
            return text
        self.pending += text
        cut = min((i for s in self.stops if (i := self.pending.find(s)) >= 0), default=-1)
        if cut >= 0:
            out, self.pending, self.stopped = self.pending[:cut], "", True
            return out
        keep = next((k for k in range(min(len(self.pending), max(map(len, self.stops)) - 1), 0, -1)
                     if any(s.startswith(self.pending[-k:]) for s in self.stops)), 0)
        out, self.pending = self.pending[:len(self.pending) - keep], self.pending[len(self.pending) - keep:]
        return out

    def finish(self) -> str:
        out, self.pending = self.pending, ""
        return out


class ReplyEvents:
    """A backend's events for one reply, sorted out: text goes through the stop trimmer and the
    splitter (its segments are returned to send), and the usage, finish reason and calls the backend
    parsed itself are kept."""

    def __init__(self, parse_tools: bool, stops: tuple[str, ...] = (), offered: frozenset[str] | None = None):
        self.splitter = ReplySplitter(parse_tools, offered)
        self.offered = offered
        self.trimmer = StopTrimmer(stops)
        self.usage = Usage()
        self.reason = "stop"
        self.backend_calls: list[dict[str, Any]] = []
        self.reasoning = ""  # what the model reasoned, for reasoning_tokens

    def take(self, event: Any) -> list[tuple[str, str]]:
        if isinstance(event, TextDelta):
            if event.reasoning:
                return self._kept(self.splitter.feed(event.text, True))
            return self._kept(self.splitter.feed(self.trimmer.feed(event.text)))
        if isinstance(event, ToolCallEvent):
            if self.offered is None or event.name in self.offered:
                self.backend_calls.append(event_call(event))
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Finish):
            self.reason = "stop" if self.trimmer.stopped else event.reason
        return []

    def finish(self) -> tuple[list[tuple[str, str]], list[ParsedCall]]:
        """The last segments and the parsed calls, once generation has ended."""
        last = self.splitter.feed(self.trimmer.finish())
        segments, calls = self.splitter.finish()
        return self._kept(last + segments), calls

    def _kept(self, segments: list[tuple[str, str]]) -> list[tuple[str, str]]:
        self.reasoning += "".join(text for kind, text in segments if kind == "reasoning")
        return segments

    def counted(self, backend: Any) -> Usage:
        """The usage with ``reasoning_tokens``: the reasoning the model produced, counted with the
        backend's own tokenizer (its tags included: the model wrote them too); none without one."""
        count = getattr(backend, "count_tokens", None)
        reasoning = self.reasoning.strip()
        if count is None or not reasoning:
            return self.usage
        try:
            tokens = int(count(f"{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}"))
        except Exception:  # a tokenizer that fails on it: the count stays unknown (0), never wrong
            return self.usage
        tokens = min(tokens, self.usage.completion_tokens) if self.usage.completion_tokens else tokens
        return replace(self.usage, extra={**self.usage.extra, "reasoning_tokens": tokens})


def event_call(event: ToolCallEvent) -> dict[str, Any]:
    """A call the backend parsed itself, as an OpenAI tool-call object."""
    arguments = event.arguments if isinstance(event.arguments, str) else json.dumps(event.arguments, ensure_ascii=False)
    return {"id": event.id or "call_" + secrets.token_hex(8), "type": "function",
            "function": {"name": event.name, "arguments": arguments}}


def offered_names(tools: Any) -> frozenset[str]:
    """The names of the tools a request offered: the only calls its reply may hold."""
    return frozenset(t.name for t in tools)

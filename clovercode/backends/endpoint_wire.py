"""Chat-completion replies → backend events, for the endpoint backend.

A streamed reply is complete only when the server says so: a ``finish_reason`` or ``data: [DONE]``.
Servers that fail after accepting a request (llama.cpp's server: a prompt over its window, a refused
streamed tool choice, a crash) answer 200 and then just close the stream; such an ending raises
:class:`StreamCut` instead of passing for the model's whole turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from clovercode.backends.base import Event, Finish, TextDelta, ToolCallEvent, Usage
from clovercode.backends.endpoint_http import HttpFailure, error_message
from clovercode.backends.sse import iter_sse_data
from clovercode.context.tokens import estimate_tokens

MESSAGE_OVERHEAD = 4  # role markers and separators a chat template adds around each message
TOOLS_OVERHEAD = 40  # the template's wrapper around the tool list
FINISH_REASONS = ("stop", "length", "tool_calls")


class StreamCut(Exception):
    """The stream ended without a finish_reason or [DONE]; ``partial``: some of the reply had come."""

    def __init__(self, partial: bool):
        super().__init__("the reply stream ended before the reply did")
        self.partial = partial


class StreamError(Exception):
    """The server sent an ``{"error": ...}`` event mid-stream."""

    def __init__(self, failure: HttpFailure):
        super().__init__(failure.message)
        self.failure = failure


class NotJson(Exception):
    """The server sent something that is not a chat completion."""


@dataclass
class Reply:
    """What a finished reply said, beyond the text already yielded."""

    usage: dict[str, Any] | None = None
    finish: str | None = None
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)  # the reply's text, for the token estimate


def decode_stream(readline: Callable[[], bytes], reply: Reply) -> Iterator[Event]:
    """Yield the text of an SSE chat-completion stream as it comes; fill ``reply`` with the rest.
    Raises StreamCut, StreamError or NotJson."""
    done = False
    for data in iter_sse_data(readline):
        if data.strip() == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise NotJson(f"streamed something that is not JSON: {data[:120]!r}") from None
        if not isinstance(chunk, dict):
            continue
        if chunk.get("error"):
            message, code = error_message(json.dumps(chunk))
            status = chunk["error"].get("code") if isinstance(chunk["error"], dict) else None
            raise StreamError(HttpFailure(message, status=status if isinstance(status, int) else 500, code=code))
        if isinstance(chunk.get("usage"), dict):
            reply.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            for text, reasoning in _texts(delta):
                reply.written.append(text)
                yield TextDelta(text, reasoning=reasoning)
            for call in delta.get("tool_calls") or ():
                merge_call(reply.calls, call)
            reply.finish = choice.get("finish_reason") or reply.finish
    if not done and reply.finish is None:
        raise StreamCut(partial=bool(reply.written or reply.calls))


def decode_whole(raw: bytes, reply: Reply) -> Iterator[Event]:
    """Yield the text of a non-streamed chat completion; fill ``reply`` with the rest. Raises NotJson."""
    try:
        body = json.loads(raw)
        choice = body["choices"][0]
        message = choice["message"]
    except (json.JSONDecodeError, KeyError, IndexError, TypeError):
        raise NotJson("answered with JSON that is not a chat completion") from None
    for text, reasoning in _texts(message):
        reply.written.append(text)
        yield TextDelta(text, reasoning=reasoning)
    for index, call in enumerate(message.get("tool_calls") or ()):
        merge_call(reply.calls, {**call, "index": index})
    reply.usage = body.get("usage") if isinstance(body.get("usage"), dict) else None
    reply.finish = choice.get("finish_reason")


def closing_events(reply: Reply, estimate: int, seconds: float) -> Iterator[Event]:
    """The calls a server parsed, the turn's usage and its Finish, once the reply is complete."""
    for index in sorted(reply.calls):
        call = reply.calls[index]
        if call["name"]:
            yield ToolCallEvent(call["name"], decode_arguments(call["arguments"]), call["id"])
    yield turn_usage(reply.usage, estimate, "".join(reply.written), seconds)
    finish = reply.finish
    yield Finish("tool_calls" if reply.calls else finish if finish in FINISH_REASONS else "stop")


def _texts(part: dict[str, Any]) -> Iterator[tuple[str, bool]]:
    reasoning = part.get("reasoning_content") or part.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        yield reasoning, True
    content = part.get("content")
    if isinstance(content, str) and content:
        yield content, False


def merge_call(calls: dict[int, dict[str, Any]], delta: dict[str, Any]) -> None:
    """Tool calls stream in fragments keyed by ``index``: the id and name once, arguments in pieces."""
    index = delta.get("index", len(calls))
    slot = calls.setdefault(index if isinstance(index, int) else len(calls), {"id": None, "name": "", "arguments": ""})
    if delta.get("id"):
        slot["id"] = delta["id"]
    function = delta.get("function") or {}
    name = function.get("name")
    if isinstance(name, str) and name and name != slot["name"]:
        slot["name"] += name
    arguments = function.get("arguments")
    if isinstance(arguments, dict):
        slot["arguments"] = arguments
    elif isinstance(arguments, str) and isinstance(slot["arguments"], str):
        slot["arguments"] += arguments


def decode_arguments(arguments: Any) -> dict[str, Any] | str:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments  # the validator tells the model its arguments were not valid JSON
    return value if isinstance(value, dict) else arguments


def estimate_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    """The prompt's size in tokens, estimated from what is sent: every message's text, reasoning and
    call arguments, and the tool definitions (a template renders them as JSON)."""
    total = 0
    for message in messages:
        total += MESSAGE_OVERHEAD
        for key in ("content", "reasoning_content"):
            if isinstance(message.get(key), str):
                total += estimate_tokens(message[key])
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            total += estimate_tokens(function.get("name") or "") + estimate_tokens(str(function.get("arguments") or ""))
    if tools:
        total += estimate_tokens(json.dumps(tools, ensure_ascii=False)) + TOOLS_OVERHEAD
    return total


def turn_usage(usage: dict[str, Any] | None, estimate: int, written: str, seconds: float) -> Usage:
    if usage and (usage.get("prompt_tokens") or usage.get("completion_tokens")):
        return Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), seconds=seconds)
    # A server that ignores stream_options sends no usage: estimate so token budgets still bite, and
    # say it is an estimate.
    return Usage(estimate, max(1, estimate_tokens(written)), seconds=seconds, extra={"usage_estimated": True})

"""Answering ``POST /v1/chat/completions``: a job's events as one completion object or as SSE chunks."""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from clovercode.backends.sse import sse_event
from clovercode.serve.errors import api_error
from clovercode.serve.protocol import (ApiError, ChatRequest, chunk_object, completion_object, finish_reason,
                                       tool_call_objects, usage_chunk_object)
from clovercode.serve.reply import Reply, ReplyEvents, collect, offered_names
from clovercode.backends.scheduler import DONE, Failed, Job

FIRST_EVENT_WAIT_S = 0.5  # how long a stream waits for its first event before answering 200


class Answering(Protocol):
    """What an answer needs of the HTTP handler."""

    app: Any

    def next_event(self, job: Job, wait: float | None = None) -> Any: ...
    def send_json(self, status: int, body: Any) -> None: ...
    def begin_events(self) -> None: ...
    def write_chunk(self, data: bytes) -> None: ...


def answer_whole(h: Answering, job: Job, request: ChatRequest) -> str:
    events, reply = ReplyEvents(request.parse_tools, request.params.stop, offered_names(request.tools)), Reply()
    while (item := h.next_event(job)) != DONE:
        if isinstance(item, Failed):
            raise api_error(item.error, h.app.log, job, request.limit_field)
        collect(events.take(item), reply)
    segments, calls = events.finish()
    collect(segments, reply)
    events.usage = events.counted(h.app.scheduler.backend)
    tool_calls = _calls(tool_call_objects(calls, request.tools) + events.backend_calls, request)
    body = completion_object(job.id, h.app.model_name, int(time.time()), reply.content.strip(),
                             reply.reasoning.strip(), tool_calls, finish_reason(events.reason, bool(tool_calls)),
                             events.usage)
    h.send_json(200, body)
    return f"200 {events.usage.completion_tokens} tokens"


def answer_stream(h: Answering, job: Job, request: ChatRequest) -> str:
    # A moment for the first event before the 200, so a failure that comes at once gets its real
    # status; then the stream opens with the role chunk whatever the model is doing (a long prefill).
    first = h.next_event(job, wait=FIRST_EVENT_WAIT_S)
    if isinstance(first, Failed):
        raise api_error(first.error, h.app.log, job, request.limit_field)
    h.begin_events()
    created, model = int(time.time()), h.app.model_name
    with_usage = request.include_usage
    out: list[bytes] = []

    def send(obj: dict[str, Any]) -> None:
        out.append(sse_event(json.dumps(obj, ensure_ascii=False)))

    def flush() -> None:
        # Events that are already waiting go out in one write: under load that saves a syscall
        # (and a wake-up of the client) per token.
        if out:
            h.write_chunk(b"".join(out))
            out.clear()

    def send_segments(segments: list[tuple[str, str]]) -> None:
        for kind, text in segments:
            key = "reasoning_content" if kind == "reasoning" else "content"
            send(chunk_object(job.id, model, created, {key: text}, with_usage_field=with_usage))

    send(chunk_object(job.id, model, created, {"role": "assistant", "content": ""}, with_usage_field=with_usage))
    flush()
    events = ReplyEvents(request.parse_tools, request.params.stop, offered_names(request.tools))
    item, failure = first if first is not None else h.next_event(job), None
    while item != DONE:
        if isinstance(item, Failed):
            failure = api_error(item.error, h.app.log, job, request.limit_field)
            break
        send_segments(events.take(item))
        if job.events.empty():
            flush()
        item = h.next_event(job)
    segments, calls = events.finish()
    send_segments(segments)
    usage = events.usage = events.counted(h.app.scheduler.backend)
    if failure is not None:  # mid-stream: the status is already 200, so the error is an event
        send(failure.body())
    else:
        tool_calls = _calls(tool_call_objects(calls, request.tools) + events.backend_calls, request)
        if tool_calls:
            send(chunk_object(job.id, model, created, {"tool_calls": [dict(call, index=i) for i, call in enumerate(tool_calls)]},
                              with_usage_field=with_usage))
        send(chunk_object(job.id, model, created, {}, finish_reason(events.reason, bool(tool_calls)),
                          with_usage_field=with_usage))
        if with_usage:
            send(usage_chunk_object(job.id, model, created, usage))
    out.append(sse_event("[DONE]"))
    flush()
    h.write_chunk(b"")
    return f"200 stream {usage.completion_tokens} tokens" if failure is None else f"stream failed: {failure.message}"


def _calls(calls: list[dict[str, Any]], request: ChatRequest) -> list[dict[str, Any]]:
    """parallel_tool_calls false: one call a reply, the first the model wrote."""
    return calls if request.parallel_tool_calls else calls[:1]


def stream_error_event(error: ApiError) -> bytes:
    return sse_event(json.dumps(error.body())) + sse_event("[DONE]")

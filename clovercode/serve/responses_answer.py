"""Answering ``POST /v1/responses``: a job's events as one response object, or as the stream of
events OpenAI's reference defines (``response.created`` … output items, text and argument deltas …
``response.completed`` with usage). Reasoning and prose stream as they come; calls are parsed when
generation ends (serve/reply.py), then sent as function-call items with their argument deltas.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, Callable

from clovercode.backends.base import Usage
from clovercode.ground.messages import CallRecord, Message
from clovercode.serve.chat import FIRST_EVENT_WAIT_S, Answering
from clovercode.serve.errors import api_error
from clovercode.serve.protocol import ApiError, tool_call_objects
from clovercode.serve.reply import ReplyEvents, offered_names
from clovercode.serve.responses import CUSTOM_INPUT, ResponsesRequest, ResponseStore, new_response_id
from clovercode.backends.scheduler import DONE, Failed, Job


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode("utf-8")


def usage_object(usage: Usage) -> dict[str, Any]:
    return {"input_tokens": usage.prompt_tokens, "input_tokens_details": {"cached_tokens": usage.cached_tokens},
            "output_tokens": usage.completion_tokens, "output_tokens_details": {"reasoning_tokens": int(usage.extra.get("reasoning_tokens", 0))},
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}


def _item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def message_item(text: str, item_id: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if status == "completed" else []
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def reasoning_item(text: str, item_id: str) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": [],
            "content": [{"type": "reasoning_text", "text": text}] if text else []}


def call_items(calls: list[dict[str, Any]], request: ResponsesRequest) -> list[dict[str, Any]]:
    """OpenAI tool-call objects as Responses items: function_call, or custom_tool_call for a custom tool."""
    if not request.parallel_tool_calls:
        calls = calls[:1]  # parallel_tool_calls false: one call a turn, the first the model wrote
    items = []
    for call in calls:
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        if name in request.custom_tools:
            try:
                value = json.loads(arguments).get(CUSTOM_INPUT, "")
            except (ValueError, AttributeError):
                value = arguments
            items.append({"id": _item_id("ctc"), "type": "custom_tool_call", "status": "completed",
                          "call_id": call["id"], "name": name, "input": value if isinstance(value, str) else json.dumps(value)})
        else:
            items.append({"id": _item_id("fc"), "type": "function_call", "status": "completed", "call_id": call["id"],
                          "name": name, "arguments": arguments})
    return items


def response_object(rid: str, model: str, created: int, request: ResponsesRequest, status: str,
                    output: list[dict[str, Any]], usage: Usage | None, error: ApiError | None = None) -> dict[str, Any]:
    text = "".join(part["text"] for item in output if item["type"] == "message" for part in item["content"])
    return {"id": rid, "object": "response", "created_at": created, "status": status, "model": model,
            "output": output, "output_text": text, "usage": usage_object(usage) if usage is not None else None,
            "error": None if error is None else {"code": error.code or error.type, "message": error.message},
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            **request.echo}


def _history(request: ResponsesRequest, output: list[dict[str, Any]]) -> list[Message]:
    """The conversation through this response's output, for a later previous_response_id."""
    reasoning = "".join(p["text"] for i in output if i["type"] == "reasoning" for p in i["content"])
    text = "".join(p["text"] for i in output if i["type"] == "message" for p in i["content"])
    calls = tuple(CallRecord(i["call_id"], i["name"], {CUSTOM_INPUT: i["input"]} if i["type"] == "custom_tool_call"
                             else json.loads(i["arguments"] or "{}"))
                  for i in output if i["type"] in ("function_call", "custom_tool_call"))
    return [*request.history, Message("assistant", text, reasoning, calls)]


def _finish(store: ResponseStore, tenant: str, request: ResponsesRequest, response: dict[str, Any]) -> None:
    if request.store:
        store.put(tenant, response, _history(request, response["output"]))


def answer_responses(store: ResponseStore, tenant: str) -> tuple[Callable[..., str], Callable[..., str]]:
    """(streamed, whole) answers for one tenant's request."""

    def whole(h: Answering, job: Job, request: ResponsesRequest) -> str:
        events = ReplyEvents(request.parse_tools, request.params.stop, offered_names(request.tools))
        parts: dict[str, str] = {"reasoning": "", "content": ""}
        while (item := h.next_event(job)) != DONE:
            if isinstance(item, Failed):
                raise api_error(item.error, h.app.log, job, "max_output_tokens")
            for kind, text in events.take(item):
                parts[kind] += text
        segments, calls = events.finish()
        for kind, text in segments:
            parts[kind] += text
        events.usage = events.counted(h.app.scheduler.backend)
        output = [reasoning_item(parts["reasoning"].strip(), _item_id("rs"))] if parts["reasoning"].strip() else []
        items = call_items(tool_call_objects(calls, request.tools) + events.backend_calls, request)
        if parts["content"].strip() or not items:
            output.append(message_item(parts["content"].strip(), _item_id("msg")))
        output += items
        status = "incomplete" if events.reason == "length" and not items else "completed"
        response = response_object(new_response_id(), h.app.model_name, int(time.time()), request, status, output,
                                   events.usage)
        _finish(store, tenant, request, response)
        h.send_json(200, response)
        return f"200 {events.usage.completion_tokens} tokens"

    def streamed(h: Answering, job: Job, request: ResponsesRequest) -> str:
        first = h.next_event(job, wait=FIRST_EVENT_WAIT_S)  # an early failure gets its real status
        if isinstance(first, Failed):
            raise api_error(first.error, h.app.log, job, "max_output_tokens")
        h.begin_events()
        writer = _EventWriter(h, new_response_id(), h.app.model_name, request)
        writer.start()
        writer.flush()  # created / in_progress at once, whatever the model is doing
        events = ReplyEvents(request.parse_tools, request.params.stop, offered_names(request.tools))
        item, failure = first if first is not None else h.next_event(job), None
        while item != DONE:
            if isinstance(item, Failed):
                failure = api_error(item.error, h.app.log, job, "max_output_tokens")
                break
            for kind, text in events.take(item):
                writer.text(kind, text)
            if job.events.empty():
                writer.flush()
            item = h.next_event(job)
        segments, calls = events.finish()
        for kind, text in segments:
            writer.text(kind, text)
        writer.close_open()
        events.usage = events.counted(h.app.scheduler.backend)
        if failure is None:
            for call in call_items(tool_call_objects(calls, request.tools) + events.backend_calls, request):
                writer.call(call)
        response = writer.end(events, failure)
        if failure is None:
            _finish(store, tenant, request, response)
        return f"200 stream {events.usage.completion_tokens} tokens" if failure is None else f"stream failed: {failure.message}"

    return streamed, whole


class _EventWriter:
    """The Responses stream: numbered events, one output item open at a time."""

    def __init__(self, h: Answering, rid: str, model: str, request: ResponsesRequest):
        self.h, self.rid, self.model, self.request = h, rid, model, request
        self.created = int(time.time())
        self.sequence = 0
        self.out: list[bytes] = []
        self.output: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the item being streamed: kind, id, text

    def send(self, kind: str, **data: Any) -> None:
        self.out.append(_sse(kind, {"type": kind, "sequence_number": self.sequence, **data}))
        self.sequence += 1

    def flush(self) -> None:
        if self.out:
            self.h.write_chunk(b"".join(self.out))
            self.out.clear()

    def _response(self, status: str, usage: Usage | None = None, error: ApiError | None = None) -> dict[str, Any]:
        return response_object(self.rid, self.model, self.created, self.request, status, list(self.output), usage, error)

    def start(self) -> None:
        self.send("response.created", response=self._response("in_progress"))
        self.send("response.in_progress", response=self._response("in_progress"))

    def text(self, kind: str, text: str) -> None:
        if not text:
            return
        if self.open is not None and self.open["kind"] != kind:
            self.close_open()
        if self.open is None:
            text = text.lstrip()
            if not text:
                return
            self._open(kind)
        assert self.open is not None
        # Trailing whitespace waits for more text: an item's text ends stripped, as the whole answer's.
        text = self.open["ws"] + text
        body = text.rstrip()
        self.open["ws"] = text[len(body):]
        if not body:
            return
        text = body
        self.open["text"] += text
        where = {"item_id": self.open["id"], "output_index": len(self.output), "content_index": 0}
        if kind == "reasoning":
            self.send("response.reasoning_text.delta", delta=text, **where)
        else:
            self.send("response.output_text.delta", delta=text, logprobs=[], **where)

    def _open(self, kind: str) -> None:
        item_id = _item_id("rs" if kind == "reasoning" else "msg")
        self.open = {"kind": kind, "id": item_id, "text": "", "ws": ""}
        index = len(self.output)
        if kind == "reasoning":
            self.send("response.output_item.added", output_index=index, item=reasoning_item("", item_id))
        else:
            self.send("response.output_item.added", output_index=index, item=message_item("", item_id, "in_progress"))
            self.send("response.content_part.added", item_id=item_id, output_index=index, content_index=0,
                      part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})

    def close_open(self) -> None:
        if self.open is None:
            return
        kind, item_id, text = self.open["kind"], self.open["id"], self.open["text"]
        where = {"item_id": item_id, "output_index": len(self.output), "content_index": 0}
        if kind == "reasoning":
            self.send("response.reasoning_text.done", text=text, **where)
            item = reasoning_item(text, item_id)
        else:
            self.send("response.output_text.done", text=text, logprobs=[], **where)
            item = message_item(text, item_id)
            self.send("response.content_part.done", part=item["content"][0], **where)
        self.send("response.output_item.done", output_index=len(self.output), item=item)
        self.output.append(item)
        self.open = None

    def call(self, item: dict[str, Any]) -> None:
        index = len(self.output)
        if item["type"] == "function_call":
            self.send("response.output_item.added", output_index=index, item={**item, "arguments": "", "status": "in_progress"})
            self.send("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=item["arguments"])
            self.send("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                      name=item["name"], arguments=item["arguments"])
        else:
            self.send("response.output_item.added", output_index=index, item={**item, "input": "", "status": "in_progress"})
            self.send("response.custom_tool_call_input.delta", item_id=item["id"], output_index=index, delta=item["input"])
            self.send("response.custom_tool_call_input.done", item_id=item["id"], output_index=index, input=item["input"])
        self.send("response.output_item.done", output_index=index, item=item)
        self.output.append(item)

    def end(self, events: ReplyEvents, failure: ApiError | None) -> dict[str, Any]:
        if failure is not None:
            response = self._response("failed", events.usage, failure)
            self.send("response.failed", response=response)
        else:
            if not self.output:  # nothing was said: still one (empty) message, as OpenAI answers
                self._open("content")
                self.close_open()
            has_calls = any(i["type"] != "message" and i["type"] != "reasoning" for i in self.output)
            status = "incomplete" if events.reason == "length" and not has_calls else "completed"
            response = self._response(status, events.usage)
            self.send(f"response.{status}", response=response)
        self.flush()
        self.h.write_chunk(b"")
        return response

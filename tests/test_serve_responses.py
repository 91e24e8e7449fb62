"""`POST /v1/responses` (OpenAI's Responses API) on `clovercode serve`, read by the official `openai`
SDK's `responses.create`, streamed and not."""

from __future__ import annotations

import json

import openai
import pytest
from serve_helpers import EchoBackend, running_server

KEY = "sk-responses-0123456789"
TOOL = {"type": "function", "name": "view_file", "description": "Show a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "start_line": {"type": "integer"}},
                       "required": ["path"]}}


@pytest.fixture(scope="module")
def app():
    with running_server(EchoBackend(), api_keys={KEY: "team", "sk-other-tenant-0123": "other"}) as app:
        yield app


def client(app, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{app.port}/v1", api_key=key, max_retries=0, timeout=20)


def test_text_in_text_out_with_usage(app):
    response = client(app).responses.create(model="test-model", input="hello there", instructions="Be brief.")
    assert response.output_text == "echo: hello there"
    assert response.status == "completed" and response.id.startswith("resp_") and response.object == "response"
    assert [item.type for item in response.output] == ["message"]
    assert response.usage.output_tokens == len("echo: hello there") and response.usage.input_tokens > 0
    assert response.instructions == "Be brief."


def test_streamed_events_follow_the_reference_order(app):
    events = list(client(app).responses.create(model="test-model", input="stream me", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "echo: stream me"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1].response
    assert done.output_text == "echo: stream me" and done.usage.output_tokens == len("echo: stream me")


@pytest.mark.parametrize("stream", [False, True])
def test_a_function_call_is_a_function_call_item(app, stream):
    result = client(app).responses.create(model="test-model", input="CALL:view_file", tools=[TOOL], stream=stream)
    if stream:
        events = list(result)
        kinds = [e.type for e in events]
        assert "response.function_call_arguments.delta" in kinds and "response.reasoning_text.delta" in kinds
        deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        assert json.loads(deltas) == {"path": "a.py", "start_line": 2}
        result = events[-1].response
    calls = [item for item in result.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("view_file", {"path": "a.py", "start_line": 2})]
    assert calls[0].call_id.startswith("call_") and result.status == "completed"
    assert [item.type for item in result.output] == ["reasoning", "message", "function_call"]
    assert result.output_text == "Sure."


def test_items_with_calls_and_outputs_become_the_conversation(app):
    items = [{"role": "user", "content": [{"type": "input_text", "text": "look"}]},
             {"type": "function_call", "call_id": "call_1", "name": "view_file", "arguments": '{"path": "a.py"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "1: x = 1"},
             {"type": "message", "role": "user", "content": "and now?"}]
    assert client(app).responses.create(model="test-model", input=items, tools=[TOOL]).output_text == "echo: and now?"


def test_previous_response_id_continues_a_stored_response_of_the_same_key_only(app):
    first = client(app).responses.create(model="test-model", input="remember 42")
    again = client(app).responses.create(model="test-model", input="what was it?", previous_response_id=first.id)
    assert again.output_text == "echo: what was it?" and again.previous_response_id == first.id
    assert again.usage.input_tokens > first.usage.input_tokens  # the history went in
    assert client(app).responses.retrieve(first.id).output_text == "echo: remember 42"
    with pytest.raises(openai.BadRequestError) as info:
        client(app, "sk-other-tenant-0123").responses.create(model="test-model", input="x", previous_response_id=first.id)
    assert info.value.code == "previous_response_not_found" and info.value.param == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        client(app, "sk-other-tenant-0123").responses.retrieve(first.id)
    unstored = client(app).responses.create(model="test-model", input="forget me", store=False)
    with pytest.raises(openai.BadRequestError, match="not found"):
        client(app).responses.create(model="test-model", input="x", previous_response_id=unstored.id)


@pytest.mark.parametrize("field,value", [
    ("tools", [{"type": "web_search"}]), ("background", True), ("include", ["message.output_text.logprobs"]),
    ("truncation", "auto"), ("input", [{"type": "input_image", "image_url": "x"}]), ("top_logprobs", 2),
    ("input", [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
    ("tool_choice", {"type": "function", "name": "nope"}), ("max_output_tokens", 0), ("text", {"format": {"type": "xml"}}),
])
def test_what_cannot_be_honoured_is_refused_naming_the_field(app, field, value):
    body = {"input": "x", field: value}
    with pytest.raises(openai.BadRequestError) as info:
        client(app).responses.create(model="test-model", **body)
    assert info.value.status_code == 400 and info.value.param and info.value.param.split("[")[0].split(".")[0] in (field, "input")


def test_context_overflow_in_the_wording_clients_match(app):
    with pytest.raises(openai.BadRequestError) as info:
        client(app).responses.create(model="test-model", input="HUGE")
    assert info.value.code == "context_length_exceeded"

"""Requests in and responses out of `clovercode serve`, as pure functions."""

import json

import pytest

from clovercode.ground.messages import CallRecord, Message
from clovercode.backends.base import GenerationParams
from clovercode.serve.protocol import ApiError, ChatRequest, Limits, parse_chat_request, tool_call_objects
from clovercode.toolcalls.parser import ParsedCall
from clovercode.toolcalls.schemas import ToolSpec, load_tool_specs

LIMITS = Limits(max_new_tokens=1000, thinking=True)
VIEW = load_tool_specs(names=["view_file"])[0]


def test_a_full_request_becomes_messages_tools_and_params():
    body = {
        "model": "clover", "stream": True, "stream_options": {"include_usage": True}, "user": "bot-3",
        "max_tokens": 5000, "temperature": 0.2, "top_p": 0.9, "stop": ["END"], "seed": 4,
        "chat_template_kwargs": {"enable_thinking": False},
        "tools": [VIEW.openai_tool()],
        "messages": [
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": [{"type": "text", "text": "fix "}, {"type": "text", "text": "it"}]},
            {"role": "assistant", "content": None, "reasoning_content": "hm",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "view_file", "arguments": "{\"path\": \"a\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "view_file", "content": "x = 1"},
        ],
    }
    assert parse_chat_request(body, LIMITS) == ChatRequest(
        model="clover",
        messages=[Message("system", "rules"), Message("user", "fix it"),
                  Message("assistant", "", "hm", (CallRecord("c1", "view_file", {"path": "a"}),)),
                  Message("tool", "x = 1", tool_call_id="c1", name="view_file")],
        tools=[ToolSpec("view_file", VIEW.description, VIEW.parameters)],
        params=GenerationParams(max_new_tokens=1000, temperature=0.2, top_p=0.9, stop=("END",), thinking=False, seed=4,
                                tool_choice="auto"),
        stream=True, include_usage=True, parse_tools=True, user="bot-3")


def test_defaults():
    request = parse_chat_request({"messages": [{"role": "user", "content": "hi"}]}, LIMITS)
    assert request.params == GenerationParams(max_new_tokens=1000, thinking=True)
    assert (request.model, request.stream, request.parse_tools, request.tools) == (None, False, False, [])


def test_tool_choice_none_keeps_tools_but_does_not_parse():
    request = parse_chat_request({"messages": [{"role": "user", "content": "hi"}], "tools": [VIEW.openai_tool()],
                                  "tool_choice": "none"}, LIMITS)
    assert request.tools and not request.parse_tools and request.params.tool_choice == "none"


@pytest.mark.parametrize("choice, expected", [
    (None, "auto"), ("auto", "auto"), ("required", "required"),  # not given: OpenAI's default, auto
    ({"type": "function", "function": {"name": "view_file"}}, "view_file"),
])
def test_tool_choice_reaches_the_backend(choice, expected):
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [VIEW.openai_tool()]}
    if choice is not None:
        body["tool_choice"] = choice
    request = parse_chat_request(body, LIMITS)
    assert request.params.tool_choice == expected and request.parse_tools


def test_response_format_json_schema_reaches_the_backend():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    request = parse_chat_request({"messages": [{"role": "user", "content": "hi"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}}, LIMITS)
    assert request.params.json_schema == schema
    plain = parse_chat_request({"messages": [{"role": "user", "content": "hi"}],
                                "response_format": {"type": "json_object"}}, LIMITS)
    assert plain.params.json_schema == {"type": "object"}


@pytest.mark.parametrize("body, param, words", [
    ([], None, "JSON object"),
    ({}, "messages", "non-empty list"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "must be one of"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages[0].content", "text parts"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[0].tool_calls[0].function.arguments", "not valid JSON"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens", "at least 1"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": 3}, "temperature", "from 0 to 2"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": [1]}, "stop", "list of at most"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n", "only n = 1"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}, "tool_choice", "needs at least one tool"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes"}, "tool_choice", "not one of"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [VIEW.openai_tool()],
      "tool_choice": {"type": "function", "function": {"name": "rm_rf"}}}, "tool_choice", "not among the tools"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools[0]", "must be"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}}, "response_format", "needs"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}, "response_format", "not supported"),
])
def test_bad_requests_name_the_field(body, param, words):
    with pytest.raises(ApiError) as info:
        parse_chat_request(body, LIMITS)
    assert info.value.status == 400 and info.value.param == param and words in info.value.message
    assert info.value.body()["error"]["type"] == "invalid_request_error"


def test_tool_call_arguments_get_the_types_of_the_request_schema():
    tool = ToolSpec("view_file", "", {"type": "object", "properties": {"path": {"type": "string"},
                                                                       "start_line": {"type": "integer"}}})
    [obj] = tool_call_objects([ParsedCall("view_file", {"path": "a.py", "start_line": "3"}, "", "xml")], [tool])
    assert obj["type"] == "function" and obj["id"].startswith("call_")
    assert obj["function"]["name"] == "view_file"
    assert json.loads(obj["function"]["arguments"]) == {"path": "a.py", "start_line": 3}

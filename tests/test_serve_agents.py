"""`serve` with what agents send, on clover-tiny (issue 48).

Only the offered tools, ever (48.2): with ``tools`` and no ``tool_choice`` (OpenAI's default,
``auto``) the reply is text or a call to one of the tools THIS request offered, arguments valid against
its schema. clover-tiny was trained on clovercode's own tools (run_command, view_file, ...) and wrote
them for any request; the grammar (text | offered calls) is what keeps it to the offered ones, on chat
and on Responses. Constrained requests share the batch (48.1): a short plain request sent beside a
tools request is not held behind it. The real engine behind an in-process server on 127.0.0.1, loaded
once."""

from __future__ import annotations

import json
import re
import threading
import time

import jsonschema
import openai
import pytest
from rich.console import Console
from serve_helpers import client, running_server, wait_for

from clovercode.backends.embedded import EmbeddedBackend
from clovercode.engine.config import EngineConfig
from clovercode.engine.engine import Engine

pytestmark = pytest.mark.slow  # loads clover-tiny

SCHEMAS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "get_time": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
}
CHAT_TOOLS = [{"type": "function", "function": {"name": n, "description": f"{n.replace('_', ' ')}", "parameters": s}}
              for n, s in SCHEMAS.items()]
RESPONSES_TOOLS = [{"type": "function", **tool["function"]} for tool in CHAT_TOOLS]
PROMPTS = ["What is the weather in Paris?", "What time is it in Tokyo?", "Show me lines 10 to 30 of src/app.py"]


@pytest.fixture(scope="module")
def app():
    engine = Engine.open("clover-tiny", EngineConfig(), Console(file=open("/dev/null", "w")))
    with running_server(EmbeddedBackend(engine), max_new_tokens=48) as app:
        yield app


@pytest.fixture(scope="module")
def url(app):
    return f"http://127.0.0.1:{app.port}/v1"


def assert_only_offered(name: str, arguments: str) -> None:
    assert name in SCHEMAS, f"a call to {name!r}, which this request never offered"
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def assert_no_unoffered_text(text: str) -> None:
    """A call the server refused to parse still shows in the text: the grammar kept the model off it."""
    for name in re.findall(r"<function=([^>\s]*)", text or ""):
        assert name in SCHEMAS, f"the model wrote a call to {name!r}: the grammar did not hold it"


def test_chat_without_tool_choice_calls_only_offered_tools(url):
    c = client(url)
    for prompt in PROMPTS:
        reply = c.chat.completions.create(model="test-model", messages=[{"role": "user", "content": prompt}],
                                          tools=CHAT_TOOLS, temperature=0, max_tokens=48)
        message = reply.choices[0].message
        for call in message.tool_calls or ():
            assert_only_offered(call.function.name, call.function.arguments)
        assert_no_unoffered_text(message.content)


def test_responses_without_tool_choice_calls_only_offered_tools(url):
    c = client(url)
    for prompt in PROMPTS:
        reply = c.responses.create(model="test-model", input=prompt, tools=RESPONSES_TOOLS, temperature=0,
                                   max_output_tokens=48)
        for item in reply.output:
            if item.type == "function_call":
                assert_only_offered(item.name, item.arguments)
            elif item.type == "message":
                assert_no_unoffered_text("".join(part.text for part in item.content if part.type == "output_text"))


def test_tool_choice_none_with_tools_never_calls(url):
    reply = client(url).chat.completions.create(model="test-model", messages=[{"role": "user", "content": PROMPTS[0]}],
                                                tools=CHAT_TOOLS, tool_choice="none", temperature=0, max_tokens=24)
    assert not reply.choices[0].message.tool_calls
    assert "<tool_call>" not in (reply.choices[0].message.content or "")


def test_a_plain_request_beside_a_tools_request_is_not_held_behind_it(app, url):
    """The tools request (a grammar) and a short plain one decode in the same batch: the plain one
    ends first. Before, a constrained request ran alone while everything behind it waited."""
    c, ended = client(url), {}

    def ask(name, **kwargs):
        c.chat.completions.create(model="test-model", messages=[{"role": "user", "content": PROMPTS[0]}], temperature=0, **kwargs)
        ended[name] = time.monotonic()

    tools = threading.Thread(target=ask, args=("tools",), kwargs={"tools": CHAT_TOOLS, "tool_choice": "required",
                                                                   "max_tokens": 48})
    tools.start()
    assert wait_for(lambda: app.scheduler.active == 1, 30)
    ask("plain", max_tokens=2)
    tools.join(60)
    assert ended["plain"] < ended["tools"], "the plain request waited for the constrained one"


def test_a_forced_call_too_big_for_its_limit_names_the_field_the_client_sent(url):
    """Issue 48.4: the 400 names max_output_tokens on Responses (max_tokens on chat), as `param`."""
    c = client(url)
    with pytest.raises(openai.BadRequestError) as chat:
        c.chat.completions.create(model="test-model", messages=[{"role": "user", "content": PROMPTS[0]}],
                                  tools=CHAT_TOOLS, tool_choice="required", max_tokens=2)
    with pytest.raises(openai.BadRequestError) as responses:
        c.responses.create(model="test-model", input=PROMPTS[0], tools=RESPONSES_TOOLS, tool_choice="required",
                           max_output_tokens=2)
    assert chat.value.param == "max_tokens" and "max_tokens 2" in chat.value.message
    assert responses.value.param == "max_output_tokens" and "max_output_tokens 2" in responses.value.message


def test_json_cut_by_the_token_limit_is_incomplete_never_complete(url):
    """Issue 48.4: a JSON Schema reply cut at the limit is no valid value: finish_reason "length" on chat,
    status "incomplete" with the reason on Responses."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
              "required": ["city", "days"]}
    c = client(url)
    reply = c.chat.completions.create(model="test-model", messages=[{"role": "user", "content": PROMPTS[0]}],
                                      max_tokens=3, temperature=0, response_format={
                                          "type": "json_schema", "json_schema": {"name": "w", "schema": schema}})
    assert reply.choices[0].finish_reason == "length", reply
    response = c.responses.create(model="test-model", input=PROMPTS[0], max_output_tokens=3, temperature=0,
                                  text={"format": {"type": "json_schema", "name": "w", "schema": schema}})
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens", response

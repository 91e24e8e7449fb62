"""Every request field `clovercode serve` reads is honoured or refused with a 400 naming it."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Iterator, Sequence

import openai
import pytest
from serve_helpers import EchoBackend, running_server

from clovercode.backends.base import Event, GenerationParams
from clovercode.ground.messages import Message
from clovercode.toolcalls.schemas import ToolSpec

TWO_CALLS = ("<tool_call>\n<function=view_file>\n<parameter=path>\na.py\n</parameter>\n</function>\n</tool_call>\n"
             "<tool_call>\n<function=view_file>\n<parameter=path>\nb.py\n</parameter>\n</function>\n</tool_call>")
TOOLS = [{"type": "function", "function": {"name": "view_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]


class Recording(EchoBackend):
    """Echo, with the params each request reached the model with, a tokenizer, and TWO → two calls."""

    def __init__(self):
        super().__init__()
        self.params: list[GenerationParams] = []

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        self.params.append(params)
        if "TWO" in messages[-1].content:
            messages = [Message("user", TWO_CALLS)]
            for event in super().generate(messages, tools, params):
                yield event if not hasattr(event, "text") else type(event)(event.text.replace("echo: ", ""))
            return
        yield from super().generate(messages, tools, params)


@pytest.fixture(scope="module")
def served():
    backend = Recording()
    with running_server(backend) as app:
        yield app, backend


def client(app) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{app.port}/v1", api_key="none", max_retries=0, timeout=20)


def ask(app, **extra: Any) -> Any:
    extra.setdefault("messages", [{"role": "user", "content": "x"}])
    return client(app).chat.completions.create(model="test-model", **extra)


@pytest.mark.parametrize("field,value", [
    ("logprobs", True), ("top_logprobs", 3), ("presence_penalty", 0.5), ("frequency_penalty", -1),
    ("logit_bias", {"50256": -100}), ("parallel_tool_calls", "no"),
])
def test_a_field_the_engine_does_not_apply_is_refused(served, field, value):
    with pytest.raises(openai.BadRequestError) as info:
        ask(served[0], **{field: value})
    assert info.value.param == field


def test_fields_that_ask_for_nothing_are_accepted(served):
    reply = ask(served[0], logprobs=False, presence_penalty=0, frequency_penalty=0.0, logit_bias={})
    assert reply.choices[0].message.content == "echo: x"


@pytest.mark.parametrize("parallel,expected", [(True, ["a.py", "b.py"]), (False, ["a.py"])])
def test_parallel_tool_calls_false_gives_at_most_one_call(served, parallel, expected):
    reply = ask(served[0], messages=[{"role": "user", "content": "TWO"}], tools=TOOLS, parallel_tool_calls=parallel)
    calls = reply.choices[0].message.tool_calls
    assert [json.loads(c.function.arguments)["path"] for c in calls] == expected


def test_json_schema_output_turns_thinking_off_so_content_holds_the_object(served):
    app, backend = served
    ask(app, response_format={"type": "json_object"})
    assert backend.params[-1].json_schema == {"type": "object"} and backend.params[-1].thinking is False


def test_an_overlong_prompt_is_refused_at_once_not_after_the_queue():
    backend = Recording()
    with running_server(backend, max_batch=1) as app:
        busy = threading.Thread(target=ask, args=(app,), kwargs={"messages": [{"role": "user", "content": "SLOW " * 8}]})
        busy.start()
        time.sleep(0.2)
        with pytest.raises(openai.BadRequestError) as info:
            ask(app, messages=[{"role": "user", "content": "word " * 5000}], max_tokens=10)
        waited_for_the_model = not busy.is_alive()
        busy.join()
    assert info.value.code == "context_length_exceeded" and not waited_for_the_model
    assert info.value.body["message"].startswith("This model's maximum context length is 4096 tokens. However, you "
                                                 "requested 5010 tokens (5000 in the messages, 10 in the completion).")


@pytest.mark.parametrize("choice,closes", [("required", True), ({"type": "function", "function": {"name": "view_file"}}, True),
                                           ("auto", False), (None, False)])
def test_a_clients_forced_call_may_be_closed_at_the_limit_the_agents_never(served, choice, closes):
    app, backend = served
    ask(app, messages=[{"role": "user", "content": "TWO"}], tools=TOOLS, **({"tool_choice": choice} if choice else {}))
    assert backend.params[-1].close_calls is closes
    from clovercode.backends.base import GenerationParams as Defaults
    assert Defaults().close_calls is False  # what the agent sends

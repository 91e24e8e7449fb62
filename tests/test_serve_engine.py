"""`clovercode serve` with the embedded block-diffusion engine behind it: the committed tiny model
(clover-tiny) in a real subprocess on 127.0.0.1, spoken to by the official `openai` client and by
the endpoint backend. The model writes each held-out turn's call in parallel blocks; the server
must hand it back as OpenAI `tool_calls`, streamed and not, to the client that asked for it."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import openai
import pytest
from serve_helpers import client, serve

from clovercode.ground.messages import Message
from clovercode.backends.base import Finish, GenerationParams, TextDelta, ToolCallEvent, Usage
from clovercode.backends.endpoint import EndpointBackend, EndpointOptions
from clovercode.bench.engine import held_out_turns
from clovercode.toolcalls.schemas import load_tool_specs

pytestmark = pytest.mark.slow

MODEL = "clover-tiny"
TURNS = [turn for turn, _ in held_out_turns(6, seed=7)]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve("--model", MODEL) as (base, _):
        yield base


def tools() -> list[dict]:
    return [spec.openai_tool() for spec in load_tool_specs()]


def ask(c: openai.OpenAI, request: str, **extra):
    extra.setdefault("max_tokens", 160)
    return c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": request}], tools=tools(),
                                     temperature=0, **extra)


def test_models_lists_the_engine_model_and_its_window(url):
    [model] = client(url).models.list().data
    assert model.id == MODEL and model.model_extra["max_model_len"] == 4096


def test_tool_calls_come_back_whole_and_streamed(url):
    c = client(url)
    exact = 0
    for turn in TURNS:
        whole = ask(c, turn.request)
        choice = whole.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        [call] = choice.message.tool_calls
        got = (call.function.name, json.loads(call.function.arguments))
        exact += got == (turn.name, turn.arguments)
        assert 0 < whole.usage.completion_tokens <= 160 and whole.usage.prompt_tokens > 0

        chunks = list(ask(c, turn.request, stream=True, stream_options={"include_usage": True}))
        deltas = [d for ch in chunks if ch.choices for d in ch.choices[0].delta.tool_calls or ()]
        streamed = (deltas[0].function.name, json.loads("".join(d.function.arguments or "" for d in deltas)))
        assert streamed == got, "greedy decoding must give the same call streamed and not"
        assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == ["tool_calls"]
        assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert exact >= len(TURNS) - 1, f"only {exact} of {len(TURNS)} calls were what the request asked for"


def test_concurrent_clients_each_get_their_own_call(url):
    c = client(url)
    with ThreadPoolExecutor(len(TURNS)) as pool:
        replies = list(pool.map(lambda turn: ask(c, turn.request), TURNS))
    alone = [ask(c, turn.request) for turn in TURNS]
    for together, by_itself in zip(replies, alone):
        assert together.choices[0].message.tool_calls[0].function.model_dump(exclude={"id"}) == \
            by_itself.choices[0].message.tool_calls[0].function.model_dump(exclude={"id"})


def test_a_prompt_longer_than_the_window_is_a_400_with_the_reason(url):
    with pytest.raises(openai.BadRequestError) as info:
        client(url).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * 5000}])
    assert info.value.code == "context_length_exceeded" and "4096" in info.value.message


def test_the_endpoint_backend_gets_a_validatable_call_from_the_engine(url):
    backend = EndpointBackend.connect(EndpointOptions(url, retries=0))
    assert (backend.model, backend.context_window) == (MODEL, 4096)
    turn = TURNS[0]
    events = list(backend.generate([Message("user", turn.request)], load_tool_specs(),
                                   GenerationParams(max_new_tokens=160, temperature=0.0)))
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert [(c.name, c.arguments) for c in calls] == [(turn.name, turn.arguments)]
    assert not "".join(e.text for e in events if isinstance(e, TextDelta)).strip()
    assert any(isinstance(e, Usage) and e.completion_tokens > 0 for e in events)
    assert isinstance(events[-1], Finish) and events[-1].reason == "tool_calls"


def test_tool_choice_required_and_named_give_valid_calls(url):
    """tool_choice reaches the engine's grammar: the call is valid against the request's schema even
    when the model is asked for a tool its request does not call for."""
    from clovercode.toolcalls.parser import ParsedCall
    from clovercode.toolcalls.validate import Validator

    c, validator = client(url), Validator(load_tool_specs())
    for turn, choice in ((TURNS[0], "required"), (TURNS[1], {"type": "function", "function": {"name": "finish"}}),
                         (TURNS[2], {"type": "function", "function": {"name": "view_file"}})):
        reply = ask(c, turn.request, tool_choice=choice)
        calls = reply.choices[0].message.tool_calls
        assert calls and reply.choices[0].finish_reason == "tool_calls"
        for call in calls:  # a request forced onto another tool may come out as more than one call
            arguments = json.loads(call.function.arguments)
            assert validator.check(ParsedCall(call.function.name, arguments, "", "json"), "x").ok
            if isinstance(choice, dict):
                assert call.function.name == choice["function"]["name"]
        streamed = list(ask(c, turn.request, tool_choice=choice, stream=True))
        deltas = [d for ch in streamed if ch.choices for d in ch.choices[0].delta.tool_calls or ()]
        assert deltas[0].function.name == calls[0].function.name


def test_tool_choice_none_never_calls(url):
    reply = ask(client(url), TURNS[0].request, tool_choice="none", max_tokens=40)
    assert not reply.choices[0].message.tool_calls and "<tool_call>" not in (reply.choices[0].message.content or "")


def test_response_format_json_schema_gives_json_that_validates(url):
    import jsonschema

    schema = {"type": "object", "properties": {"tool": {"enum": ["view_file", "run_command"]}},
              "required": ["tool"], "additionalProperties": False}
    reply = client(url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": TURNS[0].request}], max_tokens=60, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "pick", "schema": schema}},
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})  # it never learnt to close a thought
    assert reply.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(reply.choices[0].message.content), schema)


def test_a_tool_choice_naming_an_unknown_tool_is_a_400(url):
    with pytest.raises(openai.BadRequestError) as info:
        ask(client(url), TURNS[0].request, tool_choice={"type": "function", "function": {"name": "rm_rf"}})
    assert info.value.param == "tool_choice"

"""A forced call (tool_choice required or named) on the real SmolLM2-135M through the engine ends in
a complete, valid call within max_tokens: before, the model wrote on inside the value
("<parameter=city>\\nParis</parameter_city>…", or sentence after sentence) until the limit."""

from __future__ import annotations

import json

import jsonschema
import pytest
from rich.console import Console

from clovercode.backends.base import GenerationParams
from clovercode.backends.embedded import EmbeddedBackend
from clovercode.engine.config import EngineConfig
from clovercode.engine.engine import Engine
from clovercode.ground.errors import UsageError
from clovercode.ground.messages import Message
from clovercode.serve.protocol import tool_call_objects
from clovercode.serve.reply import ReplyEvents
from clovercode.toolcalls.schemas import ToolSpec
from engine_fixtures import model_cache  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

WEATHER = ToolSpec("get_weather", "Get the current weather for a city.",
                   {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
TIME = ToolSpec("get_time", "Get the local time in a timezone.",
                {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]})


@pytest.fixture(scope="module")
def backend(model_cache):  # noqa: F811
    engine = Engine.open("smollm2-demo", EngineConfig(), Console(file=open("/dev/null", "w")), cache_dir=str(model_cache))
    return EmbeddedBackend(engine)


def reply(backend, choice: str, max_tokens: int) -> tuple[list[dict], str, str]:
    """As serve asks (close_calls: the client wants a call; the agent, whose calls run, never asks)."""
    events = ReplyEvents(parse_tools=True)
    params = GenerationParams(max_new_tokens=max_tokens, tool_choice=choice, thinking=False, close_calls=True)
    for event in backend.generate([Message("user", "What is the weather in Paris right now?")], [WEATHER, TIME], params):
        events.take(event)
    segments, calls = events.finish()
    return tool_call_objects(calls, [WEATHER, TIME]), "".join(t for _, t in segments), events.reason


@pytest.mark.parametrize("max_tokens", [60, 200])
@pytest.mark.parametrize("choice", ["required", "get_weather"])
def test_a_forced_call_is_complete_and_valid_within_max_tokens(backend, choice, max_tokens):
    calls, content, _ = reply(backend, choice, max_tokens)
    assert calls, content
    for call in calls:
        spec = {"get_weather": WEATHER, "get_time": TIME}[call["function"]["name"]]
        jsonschema.validate(json.loads(call["function"]["arguments"]), spec.schema)
    if choice == "get_weather":
        assert {c["function"]["name"] for c in calls} == {"get_weather"}


def test_a_limit_too_small_for_any_call_is_refused_up_front(backend):
    with pytest.raises(UsageError, match="cannot hold a call"):
        reply(backend, "required", 5)

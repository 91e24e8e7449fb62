"""Grammar-constrained rows in the shared batch (issue 48.1): each row carries its own constraint,
checked after the shared forward where ``decode_stream`` checks it alone, so 8 rows with and without
grammars (tool_choice auto / required / named, a JSON Schema, one sampled) decoded together equal
each decoded alone, token for token. clover-tiny on CPU in float32 (the grammars need its tokenizer)."""

from __future__ import annotations

import torch
import pytest
from rich.console import Console

from clovercode.backends.base import GenerationParams
from clovercode.backends.embedded import EmbeddedBackend
from clovercode.engine.batchdecode import BatchDecoder, Request
from clovercode.engine.config import EngineConfig
from clovercode.engine.decoder import DecodeResult, decode_stream
from clovercode.engine.denoiser import CachedDenoiser
from clovercode.engine.engine import Engine
from clovercode.ground.messages import Message
from clovercode.toolcalls.schemas import ToolSpec, load_tool_specs

pytestmark = pytest.mark.slow  # loads clover-tiny and decodes 8 requests twice

WEATHER = [ToolSpec("get_weather", "the weather", {"type": "object", "properties": {"city": {"type": "string"}},
                                                 "required": ["city"]}),
           ToolSpec("get_time", "the time", {"type": "object", "properties": {"timezone": {"type": "string"}},
                                            "required": ["timezone"]})]
OWN = load_tool_specs()
PICK = {"type": "object", "properties": {"tool": {"enum": ["view_file", "run_command"]}}, "required": ["tool"]}
LIMIT = 40
ROWS = [  # (request, tools, params)
    ("Show me lines 10 to 30 of src/app.py", OWN, GenerationParams(LIMIT, tool_choice="auto", thinking=False)),
    ("What is the weather in Paris?", WEATHER, GenerationParams(LIMIT, tool_choice="auto", thinking=False)),
    ("Run the tests in tests/test_api.py", OWN, GenerationParams(LIMIT, tool_choice="required", thinking=False,
                                                                 close_calls=True)),
    ("List the files in docs/", OWN, GenerationParams(LIMIT, tool_choice="view_file", thinking=False, close_calls=True)),
    ("Which tool shows a file?", (), GenerationParams(LIMIT, json_schema=PICK, thinking=False)),
    ("Find where parse_config is defined", (), GenerationParams(LIMIT, thinking=False)),
    ("Replace 'foo' with 'bar' in util.py", OWN, GenerationParams(LIMIT, tool_choice="auto", temperature=0.8,
                                                                  seed=11, thinking=False)),
    ("Finish: the bug is fixed", (), GenerationParams(24, thinking=False)),
]


@pytest.fixture(scope="module")
def backend():
    engine = Engine.open("clover-tiny", EngineConfig(), Console(file=open("/dev/null", "w")))
    return EmbeddedBackend(engine)


def request_for(backend, key, text, tools, params):
    prompt, plan = backend.prepare([Message("user", text)], tools, params)
    return Request(key, prompt, plan, backend.engine.stops(params.stop), backend.engine.generator(plan, params.seed),
                   backend.compile_constraint(tools, params, plan.max_new_tokens))


def test_mixed_constrained_and_plain_rows_in_one_batch_equal_each_alone(backend):
    engine = backend.engine
    alone = {}
    for i, row in enumerate(ROWS):
        r = request_for(backend, str(i), *row)
        items = list(decode_stream(CachedDenoiser(engine.model), r.prompt, r.plan, engine.detokenize, r.stops,
                                   generator=r.generator, constraint=r.constraint))
        alone[r.key] = (items[-1], "".join(items[:-1]))
    decoder = BatchDecoder(engine.batch_denoiser(len(ROWS)), engine.detokenize)
    decoder.add_many([request_for(backend, str(i), *row) for i, row in enumerate(ROWS)])
    widths, results, streamed = [], {}, {str(i): "" for i in range(len(ROWS))}
    while decoder.active:
        widths.append(len(decoder))
        for key, item in decoder.step():
            if isinstance(item, DecodeResult):
                results[key] = item
            else:
                streamed[key] += item
    assert widths[0] == len(ROWS), "every row, constrained or not, decodes in the one batch"
    for key, (a, a_text) in alone.items():
        b = results[key]
        assert b.tokens == a.tokens, (key, engine.detokenize(a.tokens), engine.detokenize(b.tokens))
        assert (b.text, b.finish, streamed[key]) == (a.text, a.finish, a_text), key
        assert (b.stats.denoise_passes, b.stats.commits, b.stats.remasked) == \
            (a.stats.denoise_passes, a.stats.commits, a.stats.remasked), key
    assert any(results[k].stats.remasked for k in results) or decoder.grammar_s > 0
    assert "<tool_call>" in results["2"].text and "<function=view_file>" in results["3"].text

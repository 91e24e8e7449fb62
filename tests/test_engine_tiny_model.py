"""The committed tiny block-diffusion model decodes held-out turns into the expected calls, in
parallel: a check that the engine's semantics (logit shift, free first token, block masks) are the
ones the model was trained with. Counts forwards, never time."""

import pytest
from rich.console import Console

from clovercode.ground.messages import Message
from clovercode.bench.engine import held_out_turns
from clovercode.engine.chat import render_prompt
from clovercode.engine.config import EngineConfig
from clovercode.engine.engine import Engine

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine():
    return Engine.open("clover-tiny", EngineConfig(), Console(file=open("/dev/null", "w")))


def test_threshold_decoding_writes_the_expected_calls_in_parallel(engine):
    exact = tokens = forwards = 0
    turns = held_out_turns(8, seed=1)
    for turn, expected in turns:
        prompt = engine.encode(render_prompt(engine.tokenizer, [Message("user", turn.request)], (), False))
        result = engine.generate(prompt, engine.plan(threshold=0.9), engine.stops(("</tool_call>",)))
        exact += result.text == expected
        tokens += result.stats.new_tokens
        forwards += result.stats.forwards
    assert engine.plan().block_size == 16
    assert exact >= 6, f"only {exact} of {len(turns)} calls were exact"
    assert tokens / forwards >= 2.0

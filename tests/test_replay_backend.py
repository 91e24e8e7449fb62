"""The replay backend: recorded turns played back, with their usage; bad files are one message."""

import pytest

from clovercode.agent.messages import Message
from clovercode.backends.base import GenerationParams, TextDelta, Usage
from clovercode.backends.replay import ReplayBackend
from clovercode.context.tokens import MESSAGE_OVERHEAD, estimate_tokens, tools_tokens
from clovercode.toolcalls.schemas import load_tool_specs
from clovercode.errors import ModelUnavailable


def test_recorded_usage_replays_and_missing_usage_is_the_projects_estimate(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"text": "first reply", "usage": {"prompt_tokens": 7, "forwards": 3, "seconds": 0.5}}\n'
                    '{"kind": "run_start"}\n{"kind": "model_turn", "raw": "def f(x): return x"}\n')
    backend = ReplayBackend(path)
    messages = [Message("user", "fix calc.py, please")]
    first = list(backend.generate(messages, [], GenerationParams()))
    assert "".join(e.text for e in first if isinstance(e, TextDelta)) == "first reply"
    usage = next(e for e in first if isinstance(e, Usage))
    assert (usage.prompt_tokens, usage.forwards, usage.seconds) == (7, 3, 0.5)
    assert usage.completion_tokens == estimate_tokens("first reply")
    usage = next(e for e in backend.generate(messages, [], GenerationParams()) if isinstance(e, Usage))
    assert usage.prompt_tokens == MESSAGE_OVERHEAD + estimate_tokens("fix calc.py, please")
    # counted as /context counts a prompt: the tool schemas are part of a step's "in"
    specs = load_tool_specs()
    usage = next(e for e in ReplayBackend(path).generate(messages, specs, GenerationParams()) if isinstance(e, Usage))
    assert usage.prompt_tokens == 7  # recorded: kept
    backend = ReplayBackend(path)
    list(backend.generate(messages, specs, GenerationParams()))
    usage = next(e for e in backend.generate(messages, specs, GenerationParams()) if isinstance(e, Usage))
    assert usage.prompt_tokens == MESSAGE_OVERHEAD + estimate_tokens("fix calc.py, please") + tools_tokens(specs, estimate_tokens)


def test_a_trajectorys_null_usage_fields_count_as_absent(tmp_path):
    path = tmp_path / "trajectory.jsonl"
    path.write_text('{"kind": "model_turn", "raw": "hi", "usage": {"prompt_tokens": 5, "completion_tokens": 1, '
                    '"forwards": null, "total_prompt_tokens": 5, "usage_estimated": true}}\n')
    usage = next(e for e in ReplayBackend(path).generate([], [], GenerationParams()) if isinstance(e, Usage))
    assert (usage.prompt_tokens, usage.completion_tokens, usage.forwards) == (5, 1, None)


@pytest.mark.parametrize("usage", ['"lots"', '[1]', '{"prompt_tokens": "many"}', '{"forwards": true}'])
def test_usage_that_is_not_numbers_is_refused_when_the_file_loads(tmp_path, usage):
    path = tmp_path / "r.jsonl"
    path.write_text('{"text": "ok"}\n{"text": "done", "usage": ' + usage + '}\n')
    with pytest.raises(ModelUnavailable, match=r"r.jsonl:2: \"usage\" must be an object of numbers"):
        ReplayBackend(path)


def test_a_trajectory_replays_the_calls_an_endpoint_parsed(tmp_path):
    """An endpoint's parsed calls are not in "raw": replaying the trajectory directly must keep them."""
    from clovercode.toolcalls.parser import parse_turn

    path = tmp_path / "trajectory.jsonl"
    path.write_text('{"kind": "model_turn", "raw": "Done.", "server_calls": '
                    '[{"id": "c1", "name": "finish", "arguments": {"summary": "fixed"}}]}\n')
    events = list(ReplayBackend(path).generate([Message("user", "x")], [], GenerationParams()))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    turn = parse_turn(text)
    assert turn.content == "Done." and [(c.name, c.arguments) for c in turn.calls] == [("finish", {"summary": "fixed"})]

"""The replay backend: recorded turns played back, with their usage; bad files are one message."""

import json

import pytest

from clovercode.ground.messages import Message
from clovercode.backends.base import GenerationParams, TextDelta, Usage
from clovercode.backends.replay import ReplayBackend
from clovercode.context.tokens import MESSAGE_OVERHEAD, estimate_tokens, tools_tokens
from clovercode.toolcalls.schemas import load_tool_specs
from clovercode.ground.errors import ModelUnavailable


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


def test_a_trajectorys_observation_lines_are_not_model_turns(tmp_path):
    """Observations, warnings and format errors carry "text" too: they must not replay as turns."""
    path = tmp_path / "trajectory.jsonl"
    lines = [{"kind": "run_start", "task": "x"}, {"kind": "step_start", "step": 1},
             {"kind": "model_turn", "raw": "first"}, {"kind": "tool_call", "name": "view_file"},
             {"kind": "observation", "ok": True, "text": "1: import os"}, {"kind": "warning", "text": "careful"},
             {"kind": "format_error", "text": "bad"}, {"kind": "model_turn", "raw": "second"},
             {"kind": "context", "action": "compacted"}, {"kind": "conversation", "messages": []},
             {"kind": "run_end", "stop_reason": "finished"}, {"kind": "test_run", "passed": True},
             {"kind": "fix_result", "status": "fixed"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [t.text for t in ReplayBackend(path).turns] == ["first", "second"]


@pytest.mark.parametrize("line, message", [
    ('{"txt": "hello"}', r"r.jsonl:2: unknown key 'txt' \(did you mean 'text'\?\) in a replay turn"),
    ('{"text": "hi", "usgae": {}}', r"r.jsonl:2: unknown key 'usgae' \(did you mean 'usage'\?\)"),
    ('{"usage": {}}', r"r.jsonl:2: a replay turn needs \"text\""),
    ('{"kind": "model_trun", "raw": "x"}', r"r.jsonl:2: unknown trajectory event kind 'model_trun' \(did you mean 'model_turn'\?\)"),
    ('{"kind": "model_turn", "text": "x"}', r"r.jsonl:2: a model_turn needs \"raw\""),
])
def test_a_line_of_unknown_shape_is_an_error_naming_file_and_line(tmp_path, line, message):
    path = tmp_path / "r.jsonl"
    path.write_text('{"text": "ok"}\n' + line + "\n")
    with pytest.raises(ModelUnavailable, match=message):
        ReplayBackend(path)


def test_a_typo_in_a_replay_file_fails_the_cli_with_exit_5(tmp_path):
    from conftest import make_git_repo, run_cli

    repo = make_git_repo(tmp_path / "repo")
    path = tmp_path / "r.jsonl"
    path.write_text('{"text": "ok"}\n{"txet": "finish"}\n')
    proc = run_cli("fix", "do it", "--repo", str(repo), "--model", f"replay:{path}", "--sandbox", "none")
    assert proc.returncode == 5, proc.stderr
    assert f"{path}:2: unknown key 'txet'" in proc.stderr and "Traceback" not in proc.stderr

"""The loop end to end with the replay backend against real temporary git repositories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


from clovercode.actions.context import ToolContext
from clovercode.actions.toolbox import Toolbox
from clovercode.agent.budget import Limits, StopReason
from clovercode.agent.events import RecordingSink
from clovercode.agent.loop import Agent
from clovercode.agent.prompts import Conversation, FullHistoryPrompt
from clovercode.backends.base import Finish, GenerationParams, TextDelta, Usage
from clovercode.backends.replay import ReplayBackend
from clovercode.executors.local import LocalExecutor
from conftest import EXAMPLES
from test_parser_table import xml


def replay_file(tmp_path: Path, turns: list[str], usage: dict | None = None) -> Path:
    path = tmp_path / "replay.jsonl"
    path.write_text("".join(json.dumps({"text": t, **({"usage": usage} if usage else {})}) + "\n" for t in turns))
    return path


def make_agent(root: Path, backend, limits: Limits = Limits(max_steps=10), *, interactive: bool = False, clock=None):
    toolbox = Toolbox(ToolContext(root, LocalExecutor(), command_timeout=20))
    sink = RecordingSink()
    kwargs = {"clock": clock} if clock else {}
    agent = Agent(backend, toolbox, FullHistoryPrompt("system"), limits, GenerationParams(), sink,
                  interactive=interactive, **kwargs)
    return agent, sink


def run(root: Path, tmp_path: Path, turns: list[str], limits: Limits = Limits(max_steps=10), **kw):
    agent, sink = make_agent(root, ReplayBackend(replay_file(tmp_path, turns, kw.pop("usage", None))), limits, **kw)
    conversation = Conversation()
    result = agent.run(conversation, "fix the bug")
    return result, sink, conversation


def test_recorded_fix_changes_the_repo_and_finishes(calc_repo, tmp_path):
    agent, sink = make_agent(calc_repo, ReplayBackend(EXAMPLES / "calc.replay.jsonl"))
    result = agent.run(Conversation(), "mean is wrong")
    assert result.stop is StopReason.FINISHED
    assert result.changed == ["calc.py"] and result.steps == 4
    assert "true division" in result.summary
    assert "sum(values) / len(values)" in (calc_repo / "calc.py").read_text()
    command_obs = [o for o in sink.of("observation") if o["name"] == "run_command"]
    assert command_obs[0]["ok"] and "OK" in command_obs[0]["text"]


def test_invalid_call_gets_feedback_then_the_run_recovers(calc_repo, tmp_path):
    turns = [xml("view_file", start_line=1), xml("view_file", path="calc.py"), xml("finish", summary="done")]
    result, sink, conversation = run(calc_repo, tmp_path, turns)
    assert result.stop is StopReason.FINISHED and result.steps == 3
    tool_messages = [m for m in conversation.messages if m.role == "tool"]
    assert tool_messages[0].content.startswith("Tool call `view_file` was not run")
    assert "'path' is a required property" in tool_messages[0].content
    assert tool_messages[1].content.startswith("calc.py (lines 1-13 of 13)")
    assert len(sink.of("format_error")) == 1


def test_consecutive_format_errors_stop_the_run(calc_repo, tmp_path):
    turns = ["I will fix it.", "<tool_call>nonsense</tool_call>", xml("nope"), xml("finish", summary="never reached")]
    result, sink, conversation = run(calc_repo, tmp_path, turns, Limits(max_steps=10, max_format_errors=3))
    assert result.stop is StopReason.FORMAT_ERRORS and result.steps == 3
    assert result.stop.gave_up
    feedback = [m.content for m in conversation.messages if "feedback" in m.tags]
    assert feedback[0].startswith("Your reply contained no tool call.")
    assert feedback[1].startswith("tool call #1 could not be read")


def test_a_good_turn_resets_the_format_error_count(calc_repo, tmp_path):
    turns = ["no call", xml("list_files"), "no call", "no call", xml("finish", summary="ok")]
    result, _, _ = run(calc_repo, tmp_path, turns, Limits(max_steps=10, max_format_errors=3))
    assert result.stop is StopReason.FINISHED


def test_repeated_identical_failing_call_warns_then_stops(calc_repo, tmp_path):
    bad_edit = xml("edit_file", path="calc.py", old_text="return nothing", new_text="x")
    result, sink, conversation = run(calc_repo, tmp_path, [xml("view_file", path="calc.py")] + [bad_edit] * 4,
                                     Limits(max_steps=10, max_repeats=3))
    assert result.stop is StopReason.REPEATED_FAILURES and result.steps == 4
    warnings = sink.of("warning")
    assert len(warnings) == 1 and "exact call 2 times" in warnings[0]["text"]
    last_tool = [m for m in conversation.messages if m.role == "tool"][-1]
    assert last_tool.content.startswith("Error: ")


def test_step_budget(calc_repo, tmp_path):
    result, _, _ = run(calc_repo, tmp_path, [xml("list_files")] * 5, Limits(max_steps=3))
    assert result.stop is StopReason.MAX_STEPS and result.steps == 3
    assert result.detail == "reached the step limit (3 steps)"


def test_token_budget(calc_repo, tmp_path):
    result, _, _ = run(calc_repo, tmp_path, [xml("list_files")] * 5, Limits(max_steps=10, max_tokens=250),
                       usage={"prompt_tokens": 100, "completion_tokens": 20})
    assert result.stop is StopReason.MAX_TOKENS and result.steps == 3
    assert result.prompt_tokens == 300 and result.completion_tokens == 60


def test_time_budget(calc_repo, tmp_path):
    ticks = iter(range(0, 1000, 10))
    result, _, _ = run(calc_repo, tmp_path, [xml("list_files")] * 5, Limits(max_steps=10, max_time=25),
                       clock=lambda: next(ticks))
    assert result.stop is StopReason.MAX_TIME
    assert result.detail == "reached the time limit (25 s)"


def test_replay_exhausted_is_a_model_error(calc_repo, tmp_path):
    result, _, _ = run(calc_repo, tmp_path, [xml("list_files")])
    assert result.stop is StopReason.MODEL_ERROR and "no more turns" in result.detail


def test_interactive_plain_answer_ends_the_turn(calc_repo, tmp_path):
    result, _, _ = run(calc_repo, tmp_path, ["It computes the mean."], interactive=True)
    assert result.stop is StopReason.ANSWERED and result.summary == "It computes the mean."


def test_calls_after_finish_are_not_run(calc_repo, tmp_path):
    turn = xml("finish", summary="done") + xml("write_file", path="new.txt", content="x")
    result, _, conversation = run(calc_repo, tmp_path, [turn])
    assert result.stop is StopReason.FINISHED
    assert not (calc_repo / "new.txt").exists()
    assert conversation.messages[-1].content == "Not run: it came after finish."


class InterruptingBackend:
    """Streams part of a turn, then the user presses Ctrl-C; ``masked``: inside library code whose
    clean-up raises an error of its own (numpy's zip writer does), which the loop must still see as
    the interrupt."""

    name = "interrupting"

    def __init__(self, masked: bool = False):
        self.masked = masked

    def generate(self, messages, tools, params):
        yield TextDelta("Let me think")
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            if not self.masked:
                raise
            raise ValueError("Can't close the ZIP file while there is an open writing handle on it.")

    def close(self):
        pass


@pytest.mark.parametrize("masked", [False, True], ids=["ctrl-c", "masked-by-clean-up"])
def test_ctrl_c_during_generation_stops_with_interrupted(calc_repo, masked):
    agent, sink = make_agent(calc_repo, InterruptingBackend(masked))
    result = agent.run(Conversation(), "task")
    assert result.stop is StopReason.INTERRUPTED
    assert sink.of("run_end")[0]["stop_reason"] == "interrupted"


class ScriptedBackend:
    """Replies with fixed turns and records the prompts it was given."""

    name = "scripted"

    def __init__(self, turns):
        self.turns, self.prompts = list(turns), []

    def generate(self, messages, tools, params):
        self.prompts.append(list(messages))
        yield TextDelta(self.turns.pop(0))
        yield Usage(10, 5)
        yield Finish("stop")

    def close(self):
        pass


def test_model_sees_observations_in_order(calc_repo):
    backend = ScriptedBackend([xml("view_file", path="calc.py", end_line=2), xml("finish", summary="ok")])
    agent, _ = make_agent(calc_repo, backend)
    agent.run(Conversation(), "task")
    second_prompt = backend.prompts[1]
    assert [m.role for m in second_prompt] == ["system", "user", "assistant", "tool"]
    assistant, tool = second_prompt[2], second_prompt[3]
    assert assistant.tool_calls[0].name == "view_file" and assistant.tool_calls[0].arguments == {"path": "calc.py", "end_line": 2}
    assert tool.tool_call_id == assistant.tool_calls[0].id
    assert tool.content.startswith("calc.py (lines 1-2 of 13)")


def test_failing_command_is_an_observation_not_a_crash(calc_repo, tmp_path):
    turns = [xml("run_command", command="python3 -c 'import sys; print(\"boom\"); sys.exit(3)'"), xml("finish", summary="x")]
    result, sink, _ = run(calc_repo, tmp_path, turns)
    obs = sink.of("observation")[0]
    assert not obs["ok"] and obs["text"] == "Exit code: 3\nboom\n"
    assert result.stop is StopReason.FINISHED

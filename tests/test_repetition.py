"""The loop guard: a reply that repeats one text is cut, the stream closed, the model told."""

from __future__ import annotations

from typing import Iterator, Sequence

from test_loop import make_agent
from test_parser_table import xml

from clovercode.agent.budget import Limits, StopReason
from clovercode.ground.messages import Message
from clovercode.agent.prompts import Conversation
from clovercode.agent.repetition import RepetitionGuard, repeating_period
from clovercode.backends.base import Event, Finish, GenerationParams, TextDelta, Usage
from clovercode.toolcalls.schemas import ToolSpec


def test_a_periodic_tail_is_found_with_its_shortest_period():
    assert repeating_period("intro: " + "_path" * 300, 1000) == 5
    assert repeating_period("x" * 1000, 1000) == 1
    looping = "finish_task(lambda: " * 60
    assert repeating_period("Here's an example:\n" + looping, 1000) == len("finish_task(lambda: ")


def test_text_that_only_repeats_a_little_is_left_alone():
    code = "".join(f"def test_case_{i}(self):\n    self.assertEqual(f({i}), {i * i})\n\n" for i in range(40))
    assert repeating_period(code, 1000) is None
    table = "| a | b |\n|---|---|\n" + "| 1 | 2 |\n" * 30 + "\nThat is the table."
    assert repeating_period(table, 1000) is None
    assert repeating_period("ab" * 100, 1000) is None  # shorter than the window
    assert repeating_period("_path" * 1000, 0) is None  # off
    # a unit longer than a quarter of the window is not a loop yet
    assert repeating_period("".join(chr(65 + i % 26) for i in range(300)) * 3, 1000) is None


def test_the_guard_trims_after_the_first_copy_and_names_the_unit():
    guard = RepetitionGuard(400)
    tripped_at = None
    for i in range(200):
        if guard.feed("go_on " if i else "Plan: "):
            tripped_at = i
            break
    assert tripped_at is not None and tripped_at < 80, "it must stop soon after the window fills with the loop"
    assert guard.trimmed() == "Plan: go_on"  # the loop began at the space after "Plan:"
    assert guard.unit() == "go_on " and "'go_on '" in guard.feedback()


class LoopingBackend:
    """Writes a reply that never ends; records how much of it was asked for."""

    name = "looping"

    def __init__(self, then: str):
        self.then, self.chunks, self.closed, self.turn = then, 0, False, 0

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        self.turn += 1
        if self.turn > 1:
            yield TextDelta(self.then)
            yield Usage(10, 10)
            yield Finish("stop")
            return
        try:
            yield TextDelta("I will look at the file: ")
            for _ in range(100_000):
                self.chunks += 1
                yield TextDelta("view_file view_file ")
            yield Finish("length")
        finally:
            self.closed = True

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def close(self) -> None:
        pass


def test_a_looping_reply_is_cut_the_stream_closed_and_the_model_told(calc_repo):
    backend = LoopingBackend(then=xml("finish", summary="done"))
    agent, sink = make_agent(calc_repo, backend, Limits(max_steps=5))
    conversation = Conversation()
    result = agent.run(conversation, "fix the bug")
    assert backend.closed and backend.chunks < 100, f"generation went on for {backend.chunks} chunks"
    assert result.stop is StopReason.FINISHED and result.steps == 2
    assistant = next(m for m in conversation.messages if m.role == "assistant")
    assert assistant.content == "I will look at the file: view_file"
    feedback = [m.content for m in conversation.messages if m.role == "user" and "feedback" in m.tags]
    assert any("it kept repeating 'view_file '" in text for text in feedback)
    assert any("kept repeating" in w["text"] for w in sink.of("warning"))
    turn = sink.of("model_turn")[0]
    assert turn["usage"]["completion_tokens"] > 0 and turn["usage"]["cut"] == "repetition"


def test_the_guard_can_be_turned_off(calc_repo):
    backend = LoopingBackend(then=xml("finish", summary="done"))
    agent, _ = make_agent(calc_repo, backend, Limits(max_steps=5, repetition_window=0))
    agent.run(Conversation(), "fix the bug")
    assert backend.chunks == 100_000


def test_in_the_repl_a_cut_reply_ends_the_turn_without_a_note_in_the_history(calc_repo):
    backend = LoopingBackend(then=xml("finish", summary="done"))
    agent, sink = make_agent(calc_repo, backend, Limits(max_steps=5), interactive=True)
    conversation = Conversation()
    result = agent.run(conversation, "fix the bug")
    assert result.stop is StopReason.ANSWERED and result.steps == 1 and backend.chunks < 100
    assert [m.role for m in conversation.messages] == ["user", "assistant"]
    assert any("kept repeating" in w["text"] for w in sink.of("warning"))

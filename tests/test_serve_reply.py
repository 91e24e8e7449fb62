"""Generated text → reasoning / content / tool calls, the same however the text is chunked."""

import pytest

from clovercode.serve.reply import Reply, ReplySplitter, collect

CALL = "<tool_call>\n<function=view_file>\n<parameter=path>\ncalc.py\n</parameter>\n</function>\n</tool_call>"


def split(text: str, size: int, parse_tools: bool = True) -> tuple[Reply, list, list]:
    splitter, reply, streamed = ReplySplitter(parse_tools), Reply(), []
    for start in range(0, len(text), size):
        segments = splitter.feed(text[start:start + size])
        streamed += segments
        collect(segments, reply)
    last, calls = splitter.finish()
    collect(last, reply)
    return reply, calls, streamed + last


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_reasoning_prose_and_call_are_separated_at_any_chunking(size):
    reply, calls, _ = split("<think>\nRead it first.\n</think>\n\nI will look.\n" + CALL, size)
    assert reply.reasoning.strip() == "Read it first."
    assert reply.content.strip() == "I will look."
    assert [(c.name, c.arguments) for c in calls] == [("view_file", {"path": "calc.py"})]


@pytest.mark.parametrize("size", [1, 5])
def test_call_text_is_never_streamed(size):
    _, _, segments = split("Ok.\n" + CALL + "\n" + CALL, size)
    streamed = "".join(text for _, text in segments)
    assert "<tool_call>" not in streamed and "<function" not in streamed and "calc.py" not in streamed


def test_prose_after_the_calls_comes_at_the_end():
    reply, calls, _ = split(CALL + "\nDone for now.", 4)
    assert len(calls) == 1 and reply.content == "Done for now."


def test_a_malformed_call_is_returned_as_content_for_the_client_to_judge():
    broken = "<tool_call>\nnot a call at all\n</tool_call>"
    reply, calls, _ = split("Trying.\n" + broken, 2)
    assert calls == []
    assert reply.content == "Trying.\n" + broken


def test_without_tools_call_markup_is_plain_content():
    reply, calls, _ = split("Hi " + CALL, 3, parse_tools=False)
    assert calls == [] and reply.content == "Hi " + CALL


def test_a_bare_function_call_without_wrapper_is_parsed():
    reply, calls, _ = split("<function=list_files>\n</function>", 2)
    assert [c.name for c in calls] == ["list_files"] and reply.content == ""


def test_reasoning_without_opening_tag_drops_the_stray_close():
    # A template that opens <think> in the prompt: the reasoning streamed as content (unavoidable),
    # but the closing tag never reaches the client.
    reply, _, _ = split("plan quietly</think>\n\nThe answer.", 3)
    assert "</think>" not in reply.content and reply.content.endswith("The answer.")


def test_a_lone_angle_bracket_is_not_swallowed():
    reply, calls, _ = split("if a < b and c <d> then", 2)
    assert reply.content == "if a < b and c <d> then" and calls == []


def test_reasoning_deltas_from_the_backend_pass_through():
    splitter = ReplySplitter(True)
    assert splitter.feed("thought", reasoning=True) == [("reasoning", "thought")]
    assert splitter.feed("said") == [("content", "said")]


def test_a_call_missing_only_its_tool_call_close_is_still_a_call():
    reply, calls, _ = split("<tool_call>\n<function=view_file>\n<parameter=path>\na.py\n</parameter>\n</function>\n", 3)
    assert [(c.name, c.arguments) for c in calls] == [("view_file", {"path": "a.py"})]


def test_a_call_cut_before_its_function_close_is_text_not_a_call():
    """Cut by the token limit: the client gets what was written and no call that could run half-done."""
    text = "<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n<parameter=content>\nimport"
    reply, calls, _ = split(text, 3)
    assert calls == [] and reply.content == text


def test_a_call_to_a_tool_the_request_did_not_offer_is_no_call():
    """The allowlist at the seam every backend's reply passes: a call naming a tool the client never
    offered comes back as the text the model wrote, never as a tool call."""
    from clovercode.backends.base import TextDelta, ToolCallEvent
    from clovercode.serve.reply import ReplyEvents

    text = "<tool_call>\n<function=run_command>\n<parameter=command>\nrm -rf /\n</parameter>\n</function>\n</tool_call>"
    events = ReplyEvents(True, (), frozenset({"get_weather"}))
    events.take(TextDelta(text))
    events.take(ToolCallEvent("run_command", {"command": "rm -rf /"}))
    segments, calls = events.finish()
    assert calls == [] and events.backend_calls == [] and "".join(t for _, t in segments) == text

"""What the console shows while a turn streams: the same at any chunking, call markup hidden."""

import pytest

from clovercode.toolcalls.tagscan import TagScanner
from clovercode.ui.stream import StreamFilter

TEXT = ("<think>\nCheck calc.py.\n</think>\nI will look at a < b.\n<tool_call>\n<function=view_file>\n"
        "<parameter=path>\ncalc.py\n</parameter>\n</function>\n</tool_call>\nAfter.")


def shown(text: str, size: int) -> list[tuple[str, str]]:
    stream, out = StreamFilter(), []
    for start in range(0, len(text), size):
        out += stream.feed(text[start:start + size])
    out += stream.flush()
    merged: list[tuple[str, str]] = []
    for kind, part in out:
        if merged and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + part)
        else:
            merged.append((kind, part))
    return merged


@pytest.mark.parametrize("size", [1, 2, 5, 13, 10_000])
def test_same_result_at_any_chunking(size):
    assert shown(TEXT, size) == [("reasoning", "\nCheck calc.py.\n"), ("content", "\nI will look at a < b.\n\nAfter.")]


def test_bare_function_call_is_hidden_too():
    assert shown("Listing.\n<function=list_files>\n</function>", 3) == [("content", "Listing.\n")]


def test_a_held_back_prefix_that_is_not_a_tag_is_released():
    assert shown("x <thinking", 1) == [("content", "x <thinking")]


def test_scanner_holds_a_cut_tag_until_decided():
    scanner = TagScanner()
    scanner.feed("ab<tool_")
    assert scanner.take(["<tool_call>"]) == ("text", "ab")
    assert scanner.take(["<tool_call>"]) is None
    scanner.feed("call>x")
    assert scanner.take(["<tool_call>"]) == ("tag", "<tool_call>")
    assert scanner.take(["<tool_call>"]) == ("text", "x")
    assert scanner.drain() == ""


def test_think_tags_and_example_calls_inside_a_value_stay_hidden():
    """The value is the file's text: its think tags are not reasoning, its example call is not the end."""
    value = 'x = "<think>not mine</think>"\nExample:\n<tool_call>\n<function=list_files>\n</function>\n</tool_call>\nmore'
    text = ("Writing.\n<tool_call>\n<function=write_file>\n<parameter=content>\n" + value
            + "\n</parameter>\n</function>\n</tool_call>\nDone.")
    for size in (1, 7, 10_000):
        assert shown(text, size) == [("content", "Writing.\n\nDone.")]


def test_a_bare_call_ends_at_its_function_close():
    assert shown("<function=list_files>\n</function>\nAfter.", 4) == [("content", "\nAfter.")]

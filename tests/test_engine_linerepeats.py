"""The loop brake (clovercode/engine/linerepeats.py): what a turn that must call may not repeat.

SmolLM2-135M under ``tool_choice=required`` escaped a brake on identical lines by looping over two
lines (``<description>`` / ``<type>``) or over one sentence with a blank line after each; the brake
now sees a unit of up to MAX_UNIT non-blank lines, and it works in the prose before the call too."""

from __future__ import annotations

import pytest

from clovercode.agent.repetition import RepetitionGuard
from clovercode.engine.linerepeats import MAX_REPEATS, LoopBrake, periodic_continuations, repeat_continuation

pytest.importorskip("llguidance")
transformers = pytest.importorskip("transformers")

from clovercode.engine.constraint import GrammarCompiler, Steering  # noqa: E402
from clovercode.engine.grammar import tool_call_grammar  # noqa: E402
from clovercode.engine.sources import tiny_model_dir  # noqa: E402
from clovercode.toolcalls.schemas import load_tool_specs  # noqa: E402

TOOLS = [{"name": s.name, "parameters": s.parameters} for s in load_tool_specs()]
CALL = b"<tool_call>\n<function=finish>\n<parameter=summary>\n"
first_repeat = LoopBrake(MAX_REPEATS).first_refused


@pytest.mark.parametrize("unit", [[b"<description>"], [b"<description>", b"<type>"],
                                  [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"]])
def test_a_unit_of_lines_may_come_three_times_and_not_a_fourth(unit):
    copies = b"".join(line + b"\n" for line in unit) * MAX_REPEATS
    assert repeat_continuation(CALL + copies) == unit[0]
    assert repeat_continuation(CALL + copies + unit[0][:3]) == unit[0][3:]  # mid-line too
    assert repeat_continuation(CALL + copies + unit[0]) == b""  # only its line break is missing
    assert repeat_continuation(CALL + copies + b"something else") is None  # a different line is free
    shorter = b"".join(line + b"\n" for line in unit) * (MAX_REPEATS - 1)
    assert repeat_continuation(CALL + shorter) is None


def test_blank_lines_do_not_hide_a_loop():
    sentence = b"The function is not a function, but a method of the `Array` itself.\n\n"
    assert repeat_continuation(b"prose\n" + sentence * 3) == sentence.rstrip(b"\n")
    assert repeat_continuation(b"prose\n" + sentence * 3 + b"\n\n") is not None


def test_trailing_blanks_do_not_make_a_line_new():
    """SmolLM2 escaped the brake by adding a space to every fourth copy of its sentence."""
    line = b"The function is not a function, but a method of the `Array` class."
    tail = b"x\n" + line + b"\n" + line + b" \n" + line + b"\n"
    assert repeat_continuation(tail) == line
    assert repeat_continuation(tail + line + b"  ") == b""
    assert first_repeat(tail, [line + b" \n"]) == 0 and first_repeat(tail, [line, b" ", b"\n"]) == 2


def test_a_refused_line_may_go_on_into_a_new_one():
    tail = b"x\n" + b"It fails.\n" * 3
    assert first_repeat(tail, [b"It fails.", b" Because", b" the end is excluded.\n"]) == 3
    assert first_repeat(tail, [b"It fails.\n"]) == 0


def test_code_that_repeats_lines_apart_is_not_braked():
    code = b"def f():\n    return 1\n}\nx = 1\n}\ny = 2\n}\nz = 3\n}\n"
    assert repeat_continuation(code) is None
    closing = b"        }\n      }\n    }\n  }\n"  # nested closings differ by their indentation
    assert repeat_continuation(b"x\n" + closing) is None


def test_a_unit_longer_than_the_brake_sees_is_free():
    unit = [bytes([97 + i]) for i in range(9)]
    assert repeat_continuation(b"x\n" + b"".join(line + b"\n" for line in unit) * 3) is None


def test_first_repeat_finds_the_token_that_completes_the_refused_line():
    tail = b"x\n" + b"<a>\n<b>\n" * 3
    assert first_repeat(tail, [b"<b", b">\n"]) == 2  # a different line
    assert first_repeat(tail, [b"<", b"a", b">\n"]) == 2
    assert first_repeat(tail, [b"<a>\n"]) == 0


@pytest.mark.parametrize("unit", ["`-n` is used to get the most frequent words. ", ";", "ab\n"])
def test_the_periodic_brake_refuses_what_the_loop_guard_would_cut(unit):
    """A model that always wants one more copy of its unit, and writes "x" when refused: the agent's
    loop guard (same window) never trips, and every refusal is of a text that would have tripped it."""
    window, text, refusals = 1000, "Intro. ", 0
    guard = RepetitionGuard(window)
    while len(text) < 4000:
        piece = unit
        refused = periodic_continuations(text.encode(), window, len(piece))
        if any(piece.encode().startswith(c) for c in refused):
            refusals += 1
            piece = "x"
        text += piece
        guard.feed(piece)
        assert not guard.tripped, (refusals, text[-200:])
    assert refusals > 0


def test_the_periodic_brake_leaves_code_alone():
    code = open(__file__, "rb").read()
    brake = LoopBrake(0, 1000)
    pieces = [code[i:i + 5] for i in range(0, len(code), 5)]
    assert brake.first_refused(b"", pieces) == len(pieces)
    assert periodic_continuations(b";" * 990, 1000, 16) == [b";" * 10]
    assert periodic_continuations(b";" * 990, 1000, 9) == []  # no token that long: nothing to refuse yet


@pytest.fixture(scope="module")
def tiny():
    tok = transformers.AutoTokenizer.from_pretrained(tiny_model_dir())
    return tok, GrammarCompiler(tok, len(tok), [tok.eos_token_id])


def ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def test_the_brake_works_in_the_prose_of_a_turn_that_must_call(tiny):
    """Prose loops ran into the harness's loop guard before the prose budget steered the turn into a
    call (0 of 3 turns valid at 4,096 tokens): under steering the prose is braked as well."""
    tok, compiler = tiny
    grammar = tool_call_grammar(TOOLS, "required", "xml", compiler.special)
    braked = compiler.constraint(grammar, Steering(prose_budget=0, max_repeats=MAX_REPEATS))
    loop = "It returns two days.\n\n" * MAX_REPEATS
    assert braked.accept(ids(tok, loop)) == len(ids(tok, loop))
    again = ids(tok, "It returns two days.\n")
    taken = braked.check(again)
    assert taken < len(again)
    braked.accept(again[:taken])
    assert not bool(braked.allowed()[again[taken]]) and not braked.permits(again[taken])
    other = ids(tok, "So I will look at the code.\n")
    assert braked.check(other) == len(other)
    free = compiler.constraint(grammar)  # without steering nothing is braked
    assert free.accept(ids(tok, loop + "It returns two days.\n")) == len(ids(tok, loop + "It returns two days.\n"))


def test_two_line_loops_inside_a_call_are_braked(tiny):
    tok, compiler = tiny
    grammar = tool_call_grammar(TOOLS, "required", "xml", compiler.special)
    constraint = compiler.constraint(grammar, Steering(prose_budget=0, max_repeats=MAX_REPEATS))
    start = ids(tok, CALL.decode() + "<description>\n<type>function</type>\n" * 3)
    assert constraint.accept(start) == len(start)
    again = ids(tok, "<description>\n")
    assert constraint.check(again) < len(again)
    end = ids(tok, "</parameter>\n</function>\n</tool_call>")
    assert constraint.check(end) == len(end)


def test_a_loop_within_a_line_is_braked_inside_a_call(tiny):
    tok, compiler = tiny
    grammar = tool_call_grammar(TOOLS, "required", "xml", compiler.special)
    constraint = compiler.constraint(grammar, Steering(prose_budget=0, loop_window=200))
    start = ids(tok, CALL.decode() + "It works. " * 10)
    assert constraint.accept(start) == len(start)
    more = ids(tok, "It works. " * 20)
    taken = constraint.check(more)
    assert 0 < taken < len(more)
    assert constraint.accept(more[:taken]) == taken
    assert not constraint.permits(more[taken]) and not bool(constraint.allowed()[more[taken]])
    other = ids(tok, "And the tests pass.\n</parameter>\n</function>\n</tool_call>")
    assert constraint.check(other) == len(other)

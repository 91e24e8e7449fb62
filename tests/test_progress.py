"""Visible progress where no spinner is seen (a log, a pipe, CI): a model turn, a long command and a
model load each say they are still going, one line every ~10 s (issue 25: an 8-minute turn and a
one-time model conversion printed nothing)."""

from __future__ import annotations

import io
import time

from rich.console import Console

from clovercode.ground.heartbeat import HEARTBEAT_SECONDS, Heartbeat
from clovercode.ui.live import LiveStatus, StepStatus

EVERY = 0.05


def wait_for(lines: list[str], count: int, limit: float = 5.0) -> None:
    deadline = time.monotonic() + limit
    while len(lines) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_heartbeat_repeats_the_current_line_until_stopped():
    lines: list[str] = []
    state = {"n": 0}

    def line() -> str:
        state["n"] += 1
        return f"still going {state['n']}"

    with Heartbeat(line, lines.append, EVERY):
        wait_for(lines, 3)
    count = len(lines)
    time.sleep(EVERY * 3)
    assert count >= 3 and len(lines) == count  # nothing after stop
    assert lines[:3] == ["still going 1", "still going 2", "still going 3"]
    assert HEARTBEAT_SECONDS == 10.0  # the figure the docs and the issue name


def test_a_step_off_a_terminal_says_it_is_still_running():
    lines: list[str] = []
    live = LiveStatus(Console(file=io.StringIO()), lines.append, EVERY)
    assert not live.enabled
    status = live.start(StepStatus("step 2/30", context=lambda: 0.25))
    status.feed("some words the model wrote", [("content", "some words the model wrote")])
    wait_for(lines, 2)
    live.stop()
    count = len(lines)
    time.sleep(EVERY * 3)
    assert len(lines) == count >= 2
    assert lines[-1].startswith("… step 2/30 · ") and "tokens · context 25%" in lines[-1]
    assert "Ctrl-C" not in lines[-1]  # a log cannot be interrupted with keys


def test_a_step_on_a_terminal_draws_the_live_region_and_no_heartbeat():
    lines: list[str] = []
    live = LiveStatus(Console(file=io.StringIO(), force_terminal=True), lines.append, EVERY)
    live.start(StepStatus("step 1/30"))
    time.sleep(EVERY * 4)
    live.stop()
    assert lines == []


def test_a_line_printed_as_a_step_starts_erases_the_region_first():
    """The region is on the screen when start returns, drawn by the thread that started it: rich's own
    first draw came from its refresh thread up to 1/8 s later, and a warning printed meanwhile (an
    endpoint's first notice, as the step begins) took the region as not drawn yet, so under load the
    refresh thread drew between the two and the warning went on after the status row, which stayed
    in the scrollback (tests/test_repl_resize.py failed so once in a whole-suite run)."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    live = LiveStatus(console, [].append, EVERY)
    live.start(StepStatus("step 1/30"))
    try:
        assert "step 1/30" in out.getvalue()  # drawn already
        drawn = len(out.getvalue())
        console.print("a warning")
        printed = out.getvalue()[drawn:]
        assert printed.index("\r") < printed.index("a warning")  # back to the region's start first
    finally:
        live.stop()


def test_a_short_step_prints_nothing():
    lines: list[str] = []
    live = LiveStatus(Console(file=io.StringIO()), lines.append, every=5.0)
    live.start(StepStatus("step 1/30"))
    live.stop()
    assert lines == []


def test_model_loading_off_a_terminal_prints_each_phase_a_heartbeat_and_the_total():
    from clovercode.engine.loading import _plain_progress

    out = io.StringIO()
    console = Console(file=out, width=200)
    with _plain_progress(console, "Loading smollm2-demo", every=EVERY) as step:
        step("converting SmolLM2.gguf (92 MB) into a transformers model, once")
        time.sleep(EVERY * 3)
        step("tokenizer")
    lines = out.getvalue().splitlines()
    assert lines[0] == "Loading smollm2-demo…"
    assert lines[1] == "Loading smollm2-demo: converting SmolLM2.gguf (92 MB) into a transformers model, once…"
    assert any(line.startswith("Loading smollm2-demo: converting") and line.endswith(" s") for line in lines[2:])
    assert "Loading smollm2-demo: tokenizer…" in lines
    assert lines[-1].startswith("Loading smollm2-demo: done in ")


def test_a_command_status_line_shows_the_command_inert_and_cut():
    from clovercode.ui.live import command_label

    assert command_label("pytest -q") == "running `pytest -q`"
    spoof = command_label("echo hi\x1b[2K\rrm -rf ~\u202e")  # the model's command: it must not steer the terminal
    assert "\x1b" not in spoof and "\r" not in spoof and "\u202e" not in spoof
    assert "\\x1b[2K\\rrm -rf ~\\u202e" in spoof
    assert command_label("make\nmake install") == "running `make …`"
    long = command_label("x" * 200)
    assert long == f"running `{'x' * 60}…`"


def test_a_question_pauses_the_status_line_and_the_answer_brings_it_back_with_a_fresh_clock():
    now = [100.0]
    live = LiveStatus(Console(file=io.StringIO()), [].append, every=60, hint="Esc/Ctrl-C interrupts")
    status = live.start(StepStatus("running `sleep 5`", clock=lambda: now[0]))
    assert status.line().plain == "running `sleep 5` · 0s · Esc/Ctrl-C interrupts"
    live.suspend()  # the approval question
    live.suspend()  # asked again by the prompt itself: still held
    assert live.status is None
    now[0] += 30  # the person thinks for 30 s
    live.resume()
    assert live.status is status and status.line().plain.startswith("running `sleep 5` · 0s")
    live.stop()
    live.resume()  # nothing held after a stop: nothing comes back
    assert live.status is None

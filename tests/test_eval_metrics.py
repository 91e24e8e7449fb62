"""The metric functions on hand-written trajectories, with every expected value worked out by hand."""

from __future__ import annotations

from fractions import Fraction

import pytest

from clovercode.eval.metrics import (engine_figures, is_test_command, pass_at_k, percentile, recovered_flags,
                                     steps_from_events, summarize)


def turn(step, t, calls=(("view_file", True),), errors=(), tokens=10, forwards=None, model=None, engine=None):
    event = {"kind": "model_turn", "t": t, "step": step, "errors": list(errors),
             "calls": [{"id": f"c{step}_{i}", "name": n, "arguments": {}, "valid": v} for i, (n, v) in enumerate(calls)],
             "usage": {"completion_tokens": tokens, "forwards": forwards}, "seconds": 99.0}
    if model is not None:
        event["timing"] = {"model_seconds": model, "first_token_seconds": model / 2, "engine_seconds": engine}
    return event


def ran(step, t, name, ok, seconds, command=None, index=0):
    call_id = f"c{step}_{index}"
    return [{"kind": "tool_call", "t": t, "step": step, "id": call_id, "name": name,
             "arguments": {"command": command} if command else {}},
            {"kind": "observation", "t": t + seconds, "id": call_id, "name": name, "ok": ok, "seconds": seconds}]


def trajectory(budget=3):
    """Four steps at known times:
    1  t=0.0-1.0   valid view_file, ok               model 0.5  tool 0.25  -> success
    2  t=1.0-3.0   valid run_command tests, fails     model 1.0  tool 0.75  -> failed (tests_failed)
    3  t=3.0-3.5   invalid turn (unknown tool)        model 0.25           -> failed (invalid_call)
    4  t=3.5-4.0   valid edit_file, ok                model 0.125 tool 0.125 -> success (recovers 2 and 3)
    """
    return [
        {"kind": "run_start", "t": 0.0, "limits": {"max_format_errors": budget}},
        {"kind": "step_start", "t": 0.0, "step": 1},
        turn(1, 0.5, model=0.5), *ran(1, 0.5, "view_file", True, 0.25),
        {"kind": "step_start", "t": 1.0, "step": 2},
        turn(2, 2.0, (("run_command", True),), model=1.0), *ran(2, 2.0, "run_command", False, 0.75, "npm test"),
        # the loop answers an invalid call with an observation too; it was never run, so it is no tool step
        {"kind": "step_start", "t": 3.0, "step": 3},
        turn(3, 3.25, (("read_file", False),), model=0.25),
        {"kind": "observation", "t": 3.25, "id": "c3_0", "name": "read_file", "ok": False, "seconds": 0.0},
        {"kind": "format_error", "t": 3.25, "step": 3, "text": "Unknown tool"},
        {"kind": "step_start", "t": 3.5, "step": 4},
        turn(4, 3.625, (("edit_file", True),), model=0.125), *ran(4, 3.625, "edit_file", True, 0.125),
        {"kind": "run_end", "t": 4.0},
    ]


def test_steps_split_time_and_classify_outcomes():
    steps = steps_from_events(trajectory())
    assert [(s.step, s.valid, s.failures, s.success) for s in steps] == [
        (1, True, (), True), (2, True, ("tests_failed",), False), (3, False, ("invalid_call",), False), (4, True, (), True)]
    assert [(s.seconds, s.model_seconds, s.tool_seconds, s.overhead_seconds) for s in steps] == [
        (1.0, 0.5, 0.25, 0.25), (2.0, 1.0, 0.75, 0.25), (0.5, 0.25, 0.0, 0.25), (0.5, 0.125, 0.125, 0.25)]


def test_failure_kinds():
    events = [{"kind": "step_start", "t": 0, "step": 1},
              turn(1, 0, (("edit_file", True), ("run_command", True), ("run_command", True), ("view_file", True))),
              *ran(1, 0, "edit_file", False, 0, index=0), *ran(1, 0, "run_command", False, 0, "make build", index=1),
              *ran(1, 0, "run_command", False, 0, "python -m pytest -x", index=2), *ran(1, 0, "view_file", False, 0, index=3),
              {"kind": "run_end", "t": 1}]
    (step,) = steps_from_events(events)
    assert step.failures == ("edit_not_applied", "command_failed", "tests_failed", "tool_error")
    assert [is_test_command(c) for c in ("go test ./...", "node --test", "cargo build", "make check", "ls")] == [True, True, False, True, False]


def test_a_turn_with_parse_errors_or_no_call_is_invalid():
    no_call = turn(1, 0, calls=())
    parse_error = turn(2, 0, errors=["tool call #1 could not be read"])
    events = [{"kind": "step_start", "t": 0, "step": 1}, no_call, {"kind": "step_start", "t": 1, "step": 2}, parse_error,
              {"kind": "run_end", "t": 2}]
    assert [(s.valid, s.failures) for s in steps_from_events(events)] == [(False, ("invalid_call",)), (False, ("invalid_call",))]


def test_finish_only_step_is_neither_failed_nor_success():
    events = [{"kind": "step_start", "t": 0, "step": 1}, turn(1, 0, (("finish", True),)), {"kind": "run_end", "t": 1}]
    (step,) = steps_from_events(events)
    assert step.valid and not step.failed and not step.success


def test_a_step_without_a_model_turn_is_left_out():
    events = [{"kind": "step_start", "t": 0, "step": 1}, turn(1, 0.5), {"kind": "step_start", "t": 1, "step": 2},
              {"kind": "run_end", "t": 2}]
    assert [s.step for s in steps_from_events(events)] == [1]


def test_fix_test_rounds_fail_the_finish_step_and_are_no_step_themselves():
    """Run 1 finishes (t 0-1); fix's tests run and fail (t 1-5); run 2 edits (t 5-6) and finishes
    (t 6-7); the tests pass. The failed finish is recovered by the edit; the test time is in no step."""
    events = [
        {"kind": "run_start", "t": 0.0, "limits": {"max_format_errors": 3}},
        {"kind": "step_start", "t": 0.0, "step": 1}, turn(1, 0.5, (("finish", True),), model=0.5),
        {"kind": "run_end", "t": 1.0, "stop_reason": "finished"},
        {"kind": "test_run", "t": 5.0, "round": 0, "passed": False},
        {"kind": "run_start", "t": 5.0},
        {"kind": "step_start", "t": 5.0, "step": 1}, turn(1, 5.5, (("edit_file", True),), model=0.5),
        *ran(1, 5.5, "edit_file", True, 0.25),
        {"kind": "step_start", "t": 6.0, "step": 2}, turn(2, 6.5, (("finish", True),), model=0.5),
        {"kind": "run_end", "t": 7.0, "stop_reason": "finished"},
        {"kind": "test_run", "t": 8.0, "round": 1, "passed": True},
    ]
    steps = steps_from_events(events)
    assert [(s.failures, s.success, s.seconds) for s in steps] == [
        (("tests_failed",), False, 1.0), ((), True, 1.0), ((), False, 1.0)]
    assert recovered_flags(steps, 3) == [True, None, None]


def test_the_last_test_run_after_an_unfinished_round_blames_no_step():
    events = [
        {"kind": "step_start", "t": 0.0, "step": 1}, turn(1, 0.5, (("view_file", True),), model=0.5),
        *ran(1, 0.5, "view_file", True, 0.25),
        {"kind": "run_end", "t": 1.0, "stop_reason": "max_steps"},
        {"kind": "test_run", "t": 2.0, "round": 1, "passed": False},
    ]
    (step,) = steps_from_events(events)
    assert step.success and not step.failed


def test_recovery_window_is_the_retry_budget():
    steps = steps_from_events(trajectory())
    assert recovered_flags(steps, 3) == [None, True, True, None]
    assert recovered_flags(steps, 1) == [None, False, True, None]  # step 2's next step (3) failed


def test_recovery_needs_a_later_success():
    steps = steps_from_events(trajectory())[:3]
    assert recovered_flags(steps, 3) == [None, False, False]


def test_percentile_is_linear_between_ranks():
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 95) == 3.0 + (4.0 - 3.0) * 0.85  # position 0.95 * 3 = 2.85
    assert percentile([7.0], 95) == 7.0 and percentile([], 50) is None


def test_pass_at_k_unbiased_estimator():
    assert pass_at_k(5, 2, 1) == Fraction(2, 5)
    assert pass_at_k(5, 2, 2) == 1 - Fraction(3, 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(5, 2, 4) == 1  # fewer than k failures: some draw always holds a pass
    assert pass_at_k(3, 0, 2) == 0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_engine_figures_prefer_the_engine_timing():
    assert engine_figures(300, 10.0, 100, 2.0, 100, 40) == {
        "completion_tokens": 300, "tokens_per_second": 50.0, "tokens_per_second_source": "backend",
        "forwards": 40, "tokens_per_forward": 2.5}
    measured = engine_figures(300, 10.0, 0, 0.0, 0, 0)
    assert (measured["tokens_per_second"], measured["tokens_per_second_source"], measured["tokens_per_forward"]) == (30.0, "measured", None)
    assert engine_figures(0, 0.0, 0, 0.0, 0, 0)["tokens_per_second"] is None


def attempt(task, passed, events=None, status=None, seconds=1.0, steps=4, stop="finished"):
    return {"task": task, "status": status or ("passed" if passed else "failed"), "stop_reason": stop, "steps": steps,
            "seconds": seconds, "hidden_tests": {"passed": passed}, "trajectory": events if events is not None else trajectory()}


def test_summarize_counts_over_attempts_and_ignores_interrupted_ones():
    attempts = [attempt("a", True, seconds=1.0), attempt("a", False, seconds=3.0), attempt("b", False, seconds=2.0),
                attempt("b", True, status="interrupted", seconds=50.0)]
    s = summarize(attempts, k=2)
    assert (s["tasks"], s["attempts"]) == (2, 3)
    # b has one counted attempt: too few for pass@2, which then covers task a alone
    assert s["completion"] == {"passed": 1, "attempts": 3, "pass@1": (1 / 2 + 0) / 2, "pass@2": 1.0, "pass@2_tasks": 1}
    assert s["validity"] == {"valid_turns": 9, "turns": 12, "rate": 9 / 12}
    assert s["recovery"]["failed"] == 6 and s["recovery"]["recovered"] == 6
    assert s["recovery"]["by_kind"] == {"invalid_call": {"failed": 3, "recovered": 3, "rate": 1.0},
                                        "tests_failed": {"failed": 3, "recovered": 3, "rate": 1.0}}
    assert s["latency"]["task"] == {"n": 3, "median": 2.0, "p95": 2.9}
    assert s["latency"]["step"]["total"] == {"n": 12, "median": 0.75, "p95": 2.0}
    assert s["latency"]["step"]["overhead"]["median"] == 0.25
    assert s["engine"]["completion_tokens"] == 120 and s["engine"]["tokens_per_forward"] is None


def test_retry_budget_comes_from_the_run():
    s = summarize([attempt("a", True, trajectory(budget=1))])
    assert (s["recovery"]["failed"], s["recovery"]["recovered"]) == (2, 1)


def test_engine_extras_are_averaged_over_the_turns_reporting_them():
    events = trajectory()
    events[2]["usage"].update({"time_to_first_block": 0.5, "total_prompt_tokens": 7, "note": "text"})
    events[6]["usage"].update({"time_to_first_block": 1.5, "tokens_per_forward": 3})
    s = summarize([attempt("a", True, events)])
    assert s["engine"]["extra"] == {"time_to_first_block": 1.0, "tokens_per_forward": 3.0}


def test_error_attempts_count_as_not_completed():
    s = summarize([attempt("a", True), attempt("b", False, events=[], status="error", steps=0, stop=None)])
    assert s["errors"] == 1 and s["completion"]["pass@1"] == 0.5 and s["stop_reasons"] == {"error": 1, "finished": 1}

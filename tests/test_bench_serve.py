"""`clovercode bench serve`: the load benchmark's correctness checks (its timings are reported, not tested)."""

import json

import pytest
from conftest import run_cli


@pytest.mark.slow
def test_bench_serve_loses_nothing_mixes_nothing_and_cancels_the_killed_client():
    proc = run_cli("bench", "serve", "--clients", "3", "--requests", "2", "--max-tokens", "12", "--json", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True
    modes = {m["mode"]: m for m in report["modes"]}
    assert list(modes) == ["one-by-one", "queued", "batched"]
    for mode in modes.values():
        assert (mode["requests"], mode["completed"], mode["lost"], mode["mixed_up"]) == (6, 6, 0, 0)
        assert mode["throughput_vs_one_at_a_time"] is not None and mode["latency_p95_s"] is not None
    assert modes["one-by-one"]["killed_client"] is None
    for name in ("queued", "batched"):
        assert modes[name]["killed_client"]["cancelled"] is True
    assert modes["queued"]["mean_batch"] == 1.0 and modes["batched"]["mean_batch"] > 1.0
    assert report["forward_bound"] is None  # not asked for


def test_the_forward_bound_needs_the_embedded_engine():
    from clovercode.bench.serve import forward_bound

    assert forward_bound("tiny", 4, (8, 16)) is None  # the char-level test model has no engine to measure


def test_the_bound_reported_is_the_median_sample_and_the_two_around_the_batched_mode():
    from clovercode.bench.batchforward import BatchForwardTiming
    from clovercode.bench.serve import BoundProbe

    probe = BoundProbe("clover-tiny", 4)
    for moment, batched_s in [("before one-by-one", 2.0), ("after one-by-one", 1.0), ("after queued", 4.0),
                              ("after batched", 2.5)]:
        probe.samples.append((moment, BatchForwardTiming(4, 16, (10, 20, 30, 40), batched_s, 8.0)))
    report = probe.report()
    assert [s["bound"] for s in report["samples"]] == [4.0, 8.0, 2.0, 3.2]
    assert report["bound"] == 3.2 and report["batched_forward_ms"] == 2500.0  # the median of four: the lower middle
    assert report["around_batched"] == [2.0, 3.2]
    assert BoundProbe("clover-tiny", 4).report() is None  # nothing sampled


@pytest.mark.slow
def test_bench_serve_on_clover_tiny_batches_the_engine_and_every_reply_equals_its_unbatched_one():
    report = _clover_tiny_bench("--clients", "4", "--requests", "2", "--max-tokens", "32", "--bound")
    modes = {m["mode"]: m for m in report["modes"]}
    for mode in modes.values():
        assert (mode["completed"], mode["lost"], mode["mixed_up"]) == (8, 0, 0), mode
    assert modes["batched"]["mean_batch"] > 1.5
    for mode in modes.values():  # each mode starts with the server's prompt cache reset: no kept prompt to reuse
        assert mode["prompt_tokens"] > 0, mode
        if mode["mode"] != "batched":
            assert mode["cached_prompt_tokens"] == 0, mode
    # batched requests copy the opening (the system prompt) another live row already holds
    assert 0 < modes["batched"]["cached_prompt_tokens"] < modes["batched"]["prompt_tokens"]
    bound = report["forward_bound"]  # --bound: one forward over 4 rows against 4 one-row forwards
    assert (bound["rows"], bound["block"]) == (4, 16)
    low, high = bound["prompt_tokens"]
    assert 0 < low <= high - 32  # the served prompts' lengths, and room for the tokens asked for
    assert bound["batched_forward_ms"] > 0 and bound["one_row_forward_ms"] > 0
    assert bound["bound"] == pytest.approx(4 / bound["step_cost_vs_one_row"], rel=0.02)
    assert [s["moment"] for s in bound["samples"]] == [  # measured between the modes it bounds
        "before one-by-one", "after one-by-one", "after queued", "after batched"]
    assert bound["around_batched"] == [s["bound"] for s in bound["samples"][2:]]
    assert report["batched_vs_bound"] == pytest.approx(modes["batched"]["throughput_vs_one_at_a_time"] / bound["bound"],
                                                       abs=0.006)
    # the ceiling: the one-by-one passes as full batches at the bound's cost, plus the batched prefills
    ceiling = report["batching_ceiling"]
    assert ceiling["passes"] == modes["one-by-one"]["alone_passes"] >= 8 * 2 * 2  # two blocks: a pass and a commit each, at least
    assert ceiling["full_batch_forwards_s"] == pytest.approx(
        ceiling["passes"] * bound["batched_forward_ms"] / 1e3 / bound["rows"], rel=0.01)
    assert ceiling["batched_prefill_s"] == modes["batched"]["prefill_s"] > 0 and modes["one-by-one"]["prefill_s"] > 0
    assert ceiling["gain"] == pytest.approx(modes["one-by-one"]["seconds"] / (
        ceiling["full_batch_forwards_s"] + ceiling["batched_prefill_s"]), rel=0.02)
    for name in ("queued", "batched"):  # its short call may be written before the kill reaches the server
        killed = modes[name]["killed_client"]
        assert killed["cancelled"] or killed["finished_before_kill"], killed


@pytest.mark.slow
def test_bench_serve_conversations_reuse_each_conversations_prompt_in_every_mode():
    report = _clover_tiny_bench("--clients", "3", "--requests", "2", "--max-tokens", "16", "--conversations")
    assert report["conversations"] is True
    for mode in report["modes"]:
        assert (mode["completed"], mode["lost"], mode["mixed_up"]) == (6, 0, 0), mode
        # three openings prefilled whole; each second turn reuses at least its opening's prompt
        assert 0 < mode["cached_prompt_tokens"] < mode["prompt_tokens"], mode


def _clover_tiny_bench(*args: str) -> dict:
    proc = run_cli("bench", "serve", "--model", "clover-tiny", *args, "--json", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_the_agents_workload_adds_as_many_tool_clients_half_auto_half_required():
    from clovercode.bench.serve import workload
    from clovercode.bench.serveagents import agents_workload, final_line

    plan = agents_workload(workload(4, 2, 16, "m"))
    assert len(plan) == 8 and all("tools" not in body for jobs in plan[:4] for _, body in jobs)
    choices = [jobs[0][1]["tool_choice"] for jobs in plan[4:]]
    assert choices == ["auto", "auto", "required", "required"]
    assert len({key for jobs in plan for key, _ in jobs}) == 16  # every request its own key
    report = {"agents": True, "modes": [{"mode": "batched", "throughput_vs_one_at_a_time": 2.5}]}
    assert final_line(report) == "agents batched vs one-by-one: 2.50×" and final_line({"agents": False}) is None


@pytest.mark.slow
def test_bench_serve_agents_batches_tool_requests_with_plain_ones_and_every_reply_equals_its_own():
    report = _clover_tiny_bench("--clients", "2", "--requests", "1", "--max-tokens", "24", "--agents")  # 17 hold a call
    assert report["agents"] is True and report["ok"] is True and report["clients"] == 4
    for mode in report["modes"]:
        assert (mode["completed"], mode["lost"], mode["mixed_up"]) == (4, 0, 0), mode
    batched = next(m for m in report["modes"] if m["mode"] == "batched")
    assert batched["mean_batch"] > 1.0


def test_the_report_prints_the_batched_pass_timeline_and_ends_with_the_agents_line():
    import io

    from rich.console import Console

    from clovercode.bench.servereport import print_report

    row = {"mode": "batched", "completed": 2, "requests": 2, "requests_per_s": 1.0, "tokens_per_s": 9.0,
           "latency_p50_s": 1.0, "latency_p95_s": 1.0, "first_token_p50_s": 0.5, "mean_batch": 2.0,
           "throughput_vs_one_at_a_time": 1.8, "p95_latency_vs_one_at_a_time": 1.0, "lost": 0, "mixed_up": 0,
           "killed_client": None, "errors": [],
           "pass_ms": {"admit": 1.0, "step": 50.0, "forward": 40.0, "grammar": 2.0, "deliver": 0.5}}
    out = io.StringIO()
    print_report({"model": "m", "clients": 2, "requests_per_client": 1, "max_tokens": 8, "modes": [row],
                  "ok": True, "agents": True}, Console(file=out, width=400))
    lines = out.getvalue().strip().splitlines()
    assert any("forward 40.0, grammar masks 2.0, other host work 8.0 (4000 µs a row)" in line for line in lines)
    assert lines[-1] == "agents batched vs one-by-one: 1.80×"


def test_a_run_with_the_bound_ends_with_batched_vs_bound_and_an_agents_run_with_its_own_line_after():
    import io

    from rich.console import Console

    from clovercode.bench.servereport import print_report

    row = {"mode": "batched", "completed": 2, "requests": 2, "requests_per_s": 1.0, "tokens_per_s": 9.0,
           "latency_p50_s": 1.0, "latency_p95_s": 1.0, "first_token_p50_s": 0.5, "mean_batch": 2.0,
           "throughput_vs_one_at_a_time": 2.7, "p95_latency_vs_one_at_a_time": 1.0, "lost": 0, "mixed_up": 0,
           "killed_client": None, "errors": [], "pass_ms": None}
    bound = {"rows": 2, "block": 16, "batched_forward_ms": 1.0, "one_row_forward_ms": 0.6, "step_cost_vs_one_row": 1.67,
             "bound": 3.0, "around_batched": [3.0], "samples": [{"moment": "after batched", "bound": 3.0}]}
    ceiling = {"passes": 40, "full_batch_forwards_s": 0.02, "batched_prefill_s": 0.005, "one_by_one_prefill_s": 0.009,
               "gain": 3.2, "of_bound": 1.07}
    for agents, last in ((False, "batched vs bound: 0.90"), (True, "agents batched vs one-by-one: 2.70×")):
        out = io.StringIO()
        print_report({"model": "m", "clients": 2, "requests_per_client": 1, "max_tokens": 8, "modes": [row], "ok": True,
                      "agents": agents, "forward_bound": bound, "batched_vs_bound": 0.9, "batching_ceiling": ceiling},
                     Console(file=out, width=400))
        lines = out.getvalue().strip().splitlines()
        assert lines[-1] == last and "batched vs bound: 0.90" in lines[-2:]
        assert any("40 passes in full batches at the bound's cost (20 ms) and the batched prefills (5 ms; one by one 9 ms),"
                   " nothing else: at most 3.20× one-by-one (1.07 of the bound)" in line for line in lines)

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


@pytest.mark.slow
def test_bench_serve_on_clover_tiny_batches_the_engine_and_every_reply_equals_its_unbatched_one():
    proc = run_cli("bench", "serve", "--model", "clover-tiny", "--clients", "4", "--requests", "2", "--max-tokens", "32",
                   "--json", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    modes = {m["mode"]: m for m in report["modes"]}
    for mode in modes.values():
        assert (mode["completed"], mode["lost"], mode["mixed_up"]) == (8, 0, 0), mode
    assert modes["batched"]["mean_batch"] > 1.5
    for name in ("queued", "batched"):  # its short call may be written before the kill reaches the server
        killed = modes[name]["killed_client"]
        assert killed["cancelled"] or killed["finished_before_kill"], killed

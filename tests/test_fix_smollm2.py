"""`clovercode fix --model smollm2-demo` end to end on CPU: a 135M model rarely solves anything, but
the loop must behave: output without a valid call gets feedback, and the budget stops the run."""

import json
from pathlib import Path

import pytest

from conftest import cli_env, run_cli
from engine_fixtures import model_cache  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


def test_fix_runs_end_to_end_on_the_demo_model(calc_repo, model_cache, tmp_path):  # noqa: F811
    env = cli_env(CLOVERCODE_ENGINE_CACHE_DIR=str(model_cache), CLOVERCODE_MAX_NEW_TOKENS="40",
                  CLOVERCODE_TRAJECTORY_DIR=str(tmp_path / "runs"))
    proc = run_cli("fix", "mean() is wrong", "--repo", str(calc_repo), "--sandbox", "none", "--model", "smollm2-demo",
                   "--max-steps", "2", "--json", env=env, timeout=600)
    assert proc.returncode in (3, 4), proc.stderr  # gave up (budget) or finished without a change
    result = json.loads(proc.stdout)
    assert result["steps"] <= 2
    events = [json.loads(line) for line in Path(result["trajectory"]).read_text().splitlines()]
    turns = [e for e in events if e["kind"] == "model_turn"]
    assert turns and all(t["usage"]["forwards"] and t["usage"]["block_size"] == 1 for t in turns)
    for turn in turns:
        if not turn["calls"] or not all(call["valid"] for call in turn["calls"]):
            # A turn without a valid call is answered with feedback for the model, in the same step.
            assert any(e["kind"] == "format_error" and e["step"] == turn["step"] for e in events)
    assert any(e["kind"] == "run_end" for e in events)
    assert "Traceback" not in proc.stderr

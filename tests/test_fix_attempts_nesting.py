"""`fix --attempts N` nests each attempt's trajectory under the run's own (issue 47): RUN.jsonl holds
the run's events, RUN/RUN.attempt-K.jsonl each attempt's; the readers (replay, `trajectory
to-replay`, sessions and --resume) find them there, also after the run's files were moved."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_fix_attempts import FIX, fix, left_behind, note, project, recordings

from clovercode.agent.trajectory import to_replay
from clovercode.backends.replay import load_replay
from clovercode.context.resume import find_saved
from clovercode.fixflow.attempts import replay_for
from clovercode.ground.attemptlog import published_attempt
from clovercode.ground.errors import UsageError
from clovercode.wiring.sessions import list_sessions


def test_each_attempt_s_trajectory_is_nested_under_the_run_and_every_reader_finds_it(tmp_path):
    work = project(tmp_path)
    model = recordings(tmp_path, note(3), FIX)  # no test command: both unverified, attempt 2's diff is smaller
    result = fix(tmp_path, work, model, **{"fix.attempts": 2, "fix.test_command": "none"})
    assert result["chosen"] == 2, [(a["verdict"], a["error"]) for a in result["attempts"]]
    trajectories = tmp_path / "trajectories"
    [run] = trajectories.glob("*.jsonl")  # the run's events file is the only trajectory at the top
    assert run.name.startswith("fix-attempts-")
    nested = [run.with_suffix("") / f"{run.stem}.attempt-{k}.jsonl" for k in (1, 2)]
    assert [a["trajectory"] for a in result["attempts"]] == [str(p) for p in nested]
    events = [json.loads(line) for line in run.read_text().splitlines()]
    assert [e["trajectory"] for e in events if e["kind"] == "attempt_started"] == [str(p) for p in nested]

    # the run moved elsewhere (a CI artifact): found by the names, not by the paths its events carry
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.move(str(run), moved / run.name)
    shutil.move(str(run.with_suffix("")), moved / run.stem)
    run = moved / run.name
    texts = [turn["text"] for turn in to_replay(run)]  # the chosen attempt's turns
    assert any("return a + b" in t for t in texts) and not any("# note" in t for t in texts)
    assert any("# note 2" in turn["text"] for turn in to_replay(run, 1))
    assert [t.text for t in load_replay(run)] == texts  # --model replay:RUN.jsonl plays the chosen attempt
    assert replay_for(run, 1) == moved / run.stem / f"{run.stem}.attempt-1.jsonl"
    with pytest.raises(UsageError, match="not a `fix --attempts` run with an attempt 3"):
        to_replay(run, 3)

    # --resume ID and `sessions --all` see the nested attempts, as they saw them at the top before
    assert find_saved(moved, f"{run.stem}.attempt-2", work) == moved / run.stem / f"{run.stem}.attempt-2.jsonl"
    assert {f"{run.stem}.attempt-{k}" for k in (1, 2)} <= {s.id for s in list_sessions(moved, None)}
    assert left_behind(work) == (1, "")


def test_a_run_replayed_whole_gives_each_attempt_its_own_recorded_turns(tmp_path):
    """`fix --attempts 2 --model replay:RUN.jsonl` replays an earlier run: attempt k plays attempt k's
    nested trajectory, so the same attempts make the same choice."""
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
    first = project(tmp_path / "a")
    model = recordings(tmp_path, note(3), FIX)
    before = fix(tmp_path / "a", first, model, **{"fix.attempts": 2, "fix.test_command": "none"})
    [run] = (tmp_path / "a" / "trajectories").glob("*.jsonl")
    again = project(tmp_path / "b")
    after = fix(tmp_path / "b", again, run, **{"fix.attempts": 2, "fix.test_command": "none"})
    assert after["chosen"] == before["chosen"] == 2
    assert [a["diff"] for a in after["attempts"]] == [a["diff"] for a in before["attempts"]]
    assert [a["model"] for a in after["attempts"]] == [f"replay:{Path(a['trajectory'])}" for a in before["attempts"]]
    assert "return a + b" in (again / "calc.py").read_text()


def test_only_a_run_s_own_directory_and_an_integer_choice_are_followed(tmp_path):
    """A hand-made events file cannot point a replay outside its run's directory."""
    outside = tmp_path / "secret.jsonl"
    outside.write_text(json.dumps({"text": "leaked"}) + "\n")
    run = tmp_path / "fix-attempts-x.jsonl"
    for chosen in ("../secret", True, None):
        run.write_text(json.dumps({"kind": "fix_result", "chosen": chosen, "attempts": [{"trajectory": str(outside)}]}) + "\n")
        with pytest.raises(Exception, match="holds no assistant turns"):
            load_replay(run)
    assert not os.path.exists(tmp_path / "fix-attempts-x")
    # an attempt's trajectory is never taken for a run (no chain of runs inside runs)
    nested = tmp_path / "fix-attempts-y" / "fix-attempts-y.attempt-1.jsonl"
    nested.parent.mkdir()
    nested.write_text(json.dumps({"kind": "fix_result", "chosen": 1}) + "\n")
    (nested.with_suffix("")).mkdir()
    (nested.with_suffix("") / f"{nested.stem}.attempt-1.jsonl").write_text(json.dumps({"text": "deeper"}) + "\n")
    assert published_attempt(nested) is None

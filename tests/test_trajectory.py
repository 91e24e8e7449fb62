"""Every run writes a JSON Lines trajectory; trajectories replay, directly or converted."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import EXAMPLES, git, make_git_repo, run_cli


def trajectories() -> list[Path]:
    return sorted((Path(os.environ["XDG_STATE_HOME"]) / "clovercode" / "trajectories").glob("*.jsonl"))


def test_trajectory_records_the_run(calc_repo):
    proc = run_cli("fix", "mean is wrong", "--repo", str(calc_repo), "--model", f"replay:{EXAMPLES / 'calc.replay.jsonl'}",
                   "--sandbox", "none", "--json")
    path = Path(json.loads(proc.stdout)["trajectory"])
    assert path in trajectories()
    events = [json.loads(line) for line in path.read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    # the loop's run, then what fix adds after it: the baseline test run (made before the loop, recorded
    # once the trajectory exists), the test run after finish, the commit's own run in a clean checkout
    # (issue 46) and the outcome
    assert kinds[0] == "run_start" and kinds[-5:] == ["run_end", "test_run", "test_run", "clean_run", "fix_result"]
    assert [e.get("baseline", False) for e in events if e["kind"] == "test_run"] == [True, False]
    assert kinds.count("model_turn") == 4 and kinds.count("observation") == 3 and kinds.count("tool_call") == 3
    assert "text_delta" not in kinds
    assert all(isinstance(e["t"], float) or isinstance(e["t"], int) for e in events)
    start = events[0]
    assert start["task"].startswith("mean is wrong\n\nThe project's tests run with") and "view_file" in start["tools"]
    turn = next(e for e in events if e["kind"] == "model_turn")
    assert turn["calls"] == [{"id": "call_1_1", "name": "view_file", "arguments": {"path": "calc.py"}, "valid": True}]
    assert turn["reasoning"].startswith("The issue says") and "usage" in turn and "seconds" in turn
    end = events[-5]
    assert end["stop_reason"] == "finished" and end["changed_files"] == ["calc.py"]


def test_trajectory_replays_directly_and_after_conversion(calc_repo, tmp_path):
    run_cli("fix", "mean is wrong", "--repo", str(calc_repo), "--model", f"replay:{EXAMPLES / 'calc.replay.jsonl'}",
            "--sandbox", "none")
    recorded = trajectories()[0]

    again = make_git_repo(tmp_path / "again", EXAMPLES / "calc")
    direct = run_cli("fix", "mean is wrong", "--repo", str(again), "--model", f"replay:{recorded}", "--sandbox", "none", "--json")
    assert json.loads(direct.stdout)["status"] == "fixed"
    # exactly the recorded turns: the observations between them are not turns of their own
    assert json.loads(direct.stdout)["steps"] == 4
    replayed = [json.loads(line) for line in Path(json.loads(direct.stdout)["trajectory"]).read_text().splitlines()]
    assert [e["kind"] for e in replayed].count("model_turn") == 4
    assert "format_error" not in [e["kind"] for e in replayed]

    converted = tmp_path / "converted.jsonl"
    proc = run_cli("trajectory", "to-replay", str(recorded), "-o", str(converted))
    assert proc.returncode == 0
    original = [json.loads(l)["text"] for l in (EXAMPLES / "calc.replay.jsonl").read_text().splitlines()]
    assert [json.loads(l)["text"] for l in converted.read_text().splitlines()] == original

    third = make_git_repo(tmp_path / "third", EXAMPLES / "calc")
    via_file = run_cli("fix", "mean is wrong", "--repo", str(third), "--model", f"replay:{converted}", "--sandbox", "none", "--json")
    assert json.loads(via_file.stdout)["status"] == "fixed"
    assert git(third, "diff") == git(again, "diff")


def test_to_replay_rejects_files_without_turns(tmp_path):
    empty = tmp_path / "t.jsonl"
    empty.write_text(json.dumps({"kind": "run_start"}) + "\n")
    proc = run_cli("trajectory", "to-replay", str(empty))
    assert proc.returncode == 2 and "holds no model turns" in proc.stderr


def test_trajectory_dir_is_configurable(calc_repo, tmp_path, isolated_home):
    target = tmp_path / "trajs"  # the user's setting (a project file never chooses where clovercode writes)
    config = isolated_home / ".config" / "clovercode" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'trajectory_dir = "{target}"\n')
    from conftest import cli_env

    run_cli("fix", "x", "--repo", str(calc_repo), "--model", f"replay:{EXAMPLES / 'calc.replay.jsonl'}", "--sandbox", "none",
            env=cli_env())
    assert len(list(target.glob("*.jsonl"))) == 1


def test_unwritable_trajectory_dir_is_a_clear_error(calc_repo, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env_dir = {"CLOVERCODE_TRAJECTORY_DIR": str(blocker / "trajs")}  # under a file: cannot be created
    from conftest import cli_env

    proc = run_cli("fix", "x", "--repo", str(calc_repo), "--model", f"replay:{EXAMPLES / 'calc.replay.jsonl'}",
                   "--sandbox", "none", env=cli_env(**env_dir))
    assert proc.returncode == 2, proc.stderr
    assert f"error: cannot write the trajectory {blocker / 'trajs'}" in proc.stderr
    assert "CLOVERCODE_TRAJECTORY_DIR" in proc.stderr and "internal error" not in proc.stderr


def test_to_replay_into_an_unwritable_path_is_a_usage_error(calc_repo, tmp_path):
    run_cli("fix", "mean is wrong", "--repo", str(calc_repo), "--model", f"replay:{EXAMPLES / 'calc.replay.jsonl'}",
            "--sandbox", "none")
    proc = run_cli("trajectory", "to-replay", str(trajectories()[0]), "-o", str(tmp_path))  # a directory
    assert proc.returncode == 2 and f"error: cannot write {tmp_path}: Is a directory" in proc.stderr


def test_calls_a_server_parsed_replay_from_the_converted_trajectory(tmp_path):
    from openai_stub import StubServer, chunk, sse

    from clovercode.backends.endpoint import EndpointBackend, EndpointOptions
    from clovercode.backends.replay import ReplayBackend
    from clovercode.ground.config import load_config
    from clovercode.executors.select import make_executor
    from clovercode.wiring.session import Session

    cfg = load_config(tmp_path, {}, {"sandbox": "none"})
    with StubServer(["clover"]) as stub:
        stub.script.append(sse([chunk({"content": "Done."}),
                                chunk({"tool_calls": [{"index": 0, "id": "c", "function": {
                                    "name": "finish", "arguments": "{\"summary\": \"ok\"}"}}]}),
                                chunk({}, "tool_calls")]))
        session = Session(tmp_path, cfg, EndpointBackend(EndpointOptions(stub.url, model="clover", retries=0)),
                          make_executor(cfg), interactive=False)
        assert session.run_task("do it").summary == "ok"
    # The server's calls are not in the turn's raw text: the replay must get them all the same.
    converted = tmp_path / "converted.jsonl"
    assert run_cli("trajectory", "to-replay", str(session.last_trajectory), "-o", str(converted)).returncode == 0
    again = Session(tmp_path, cfg, ReplayBackend(converted), make_executor(cfg), interactive=False).run_task("do it")
    assert (again.stop.value, again.summary) == ("finished", "ok")


def test_every_event_kind_the_code_writes_is_known_to_the_replay():
    """A replay refuses unknown kinds, so each kind emitted anywhere must be listed as a non-turn kind."""
    import re

    from clovercode.agent.trajectory import NON_TURN_KINDS
    from clovercode.context.resume import SNAPSHOT

    package = Path(__file__).resolve().parent.parent / "clovercode"
    emitted = {SNAPSHOT}
    for source in package.rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        emitted |= set(re.findall(r"\bemit\(\s*\"(\w+)\"", text))
        emitted |= set(re.findall(r"record_event\([^,]+,\s*\"(\w+)\"", text))
    assert {"run_start", "observation", "test_run", "fix_result"} <= emitted
    assert emitted - {"model_turn", "text_delta"} <= NON_TURN_KINDS

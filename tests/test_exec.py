"""`clovercode exec`: headless runs as a real subprocess, the --json stream checked against its schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from conftest import EXAMPLES, cli_env, run_cli
from test_parser_table import xml

from clovercode.ui.jsonevents import SCHEMA_VERSION, schema_path


def replay(tmp_path: Path, *turns: str) -> str:
    path = tmp_path / "turns.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    return f"replay:{path}"


@pytest.fixture
def plain_dir(tmp_path) -> Path:
    """The demo project without git: exec needs no repository."""
    import shutil

    return Path(shutil.copytree(EXAMPLES / "calc", tmp_path / "calc"))


def events_of(stdout: str, returncode: int | None = None) -> list[dict]:
    """Every line validated against the schema, and the stream's contract checked: run_started first,
    run_completed last (with the process's exit code), an error event right before a non-zero one,
    every observation after the tool_call it answers."""
    schema = json.loads(schema_path().read_text())
    validator = jsonschema.Draft202012Validator(schema)
    jsonschema.Draft202012Validator.check_schema(schema)
    events = [json.loads(line) for line in stdout.splitlines()]
    for event in events:
        validator.validate(event)
    assert events[0]["type"] == "run_started" and events[0]["version"] == SCHEMA_VERSION
    assert [e["type"] for e in events].count("run_started") == 1
    done = events[-1]
    assert done["type"] == "run_completed" and [e["type"] for e in events].count("run_completed") == 1
    if returncode is not None:
        assert done["exit_code"] == returncode
    errors = [e for e in events if e["type"] == "error"]
    if done["exit_code"] != 0:
        assert errors == [events[-2]] and errors[0]["exit_code"] == done["exit_code"]
    else:
        assert not errors
    announced: set[str] = set()
    for event in events:
        if event["type"] == "tool_call":
            announced.add(event["id"])
        elif event["type"] == "observation":
            assert event["id"] in announced, f"an observation with no tool_call before it: {event}"
    return events


def test_json_stream_of_a_tool_error_and_its_recovery_matches_the_schema(plain_dir, tmp_path):
    model = replay(
        tmp_path,
        xml("edit_file", path="calc.py", old_text="return sum(values) / len(values)", new_text="x"),  # not viewed yet
        xml("nonexistent_tool", path="calc.py"),  # an unknown tool: one observation, no duplicate warning
        xml("view_file", path="calc.py"),
        xml("edit_file", path="calc.py", old_text="sum(values) // len(values)", new_text="sum(values) / len(values)"),
        xml("finish", summary="mean() now uses true division."),
    )
    proc = run_cli("exec", "--json", "--model", model, "mean([1, 2, 3, 4]) should be 2.5", cwd=plain_dir)
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout, proc.returncode)
    kinds = [e["type"] for e in events]
    calls = [e for e in events if e["type"] == "tool_call"]
    assert [c["valid"] for c in calls] == [True, False, True, True]  # the unknown tool is shown, and never runs
    assert calls[1]["name"] == "nonexistent_tool" and "<function=nonexistent_tool>" in calls[1]["raw"]
    assert "nonexistent_tool" in calls[1]["error"]
    observations = [e for e in events if e["type"] == "observation"]
    assert [o["ok"] for o in observations] == [False, False, True, True]
    assert "view_file" in observations[0]["text"] and "nonexistent_tool" in observations[1]["text"]
    assert "diff" in observations[3] and "+    return sum(values) / len(values)" in observations[3]["diff"]
    # each error is said once: the unknown tool's observation is not repeated as a format_error warning
    assert not [e for e in events if e["type"] == "warning" and e["text"] == observations[1]["text"]]
    done = events[-1]
    assert done["stop_reason"] == "finished" and done["exit_code"] == 0 and done["steps"] == 5
    assert done["answer"] == "mean() now uses true division." and done["changed_files"] == ["calc.py"]
    assert done["usage"]["prompt_tokens"] == sum(e["usage"]["prompt_tokens"] for e in events if e["type"] == "model_text")
    assert events[0]["session_id"] and Path(done["trajectory"]).stem == events[0]["session_id"]
    assert "sum(values) / len(values)" in (plain_dir / "calc.py").read_text()
    assert not (plain_dir / ".git").exists()  # no repository needed, none made


def test_task_from_stdin_and_the_answer_on_stdout(plain_dir, tmp_path):
    proc = run_cli("exec", "--model", replay(tmp_path, "It computes a mean."), cwd=plain_dir, input="what is calc.py?\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "It computes a mean.\n"  # the answer alone; progress is on stderr
    assert "stopped: the model answered" in proc.stderr and "--resume" in proc.stderr


def test_approval_suggest_refuses_and_says_so(plain_dir, tmp_path):
    model = replay(tmp_path, xml("write_file", path="new.txt", content="hi"), "I could not write it.")
    proc = run_cli("exec", "--json", "--approval", "suggest", "--model", model, "write new.txt", cwd=plain_dir)
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    refused = [e for e in events if e["type"] == "warning" and e["category"] == "approval"]
    assert len(refused) == 1 and "new.txt" in refused[0]["text"]
    assert not (plain_dir / "new.txt").exists()


def test_exit_codes_gave_up_model_error_and_usage(plain_dir, tmp_path):
    proc = run_cli("exec", "--json", "--max-steps", "1", "--model",
                   replay(tmp_path, xml("view_file", path="calc.py")), "look", cwd=plain_dir)
    assert proc.returncode == 3 and events_of(proc.stdout, 3)[-1]["stop_reason"] == "max_steps"
    proc = run_cli("exec", "--json", "--model", f"replay:{tmp_path / 'missing.jsonl'}", "look", cwd=plain_dir)
    assert proc.returncode == 5
    started, error, done = events_of(proc.stdout, 5)
    assert error["type"] == "error" and "missing.jsonl" in error["message"]
    assert started["task"] == "look" and started["model"].endswith("missing.jsonl") and "view_file" in started["tools"]
    assert done["stop_reason"] == "error" and done["steps"] == 0 and done["detail"] == error["message"]
    proc = run_cli("exec", "--model", replay(tmp_path, "x"), cwd=plain_dir, input="  \n")
    assert proc.returncode == 2 and "the task is empty" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("exec", "--max-steps", "0", "--model", replay(tmp_path, "x"), "look", cwd=plain_dir,
                   env=cli_env(COLUMNS="200"))
    assert proc.returncode == 2 and "--max-steps must be at least 1" in proc.stderr


def test_the_task_size_rule_is_the_repls_and_fixs(plain_dir, tmp_path):
    from clovercode.ground.taskinput import MAX_TASK_CHARS

    proc = run_cli("exec", "--model", replay(tmp_path, "x"), cwd=plain_dir, input="x" * (MAX_TASK_CHARS + 1))
    assert proc.returncode == 2 and f"at most {MAX_TASK_CHARS:,} are accepted" in proc.stderr
    proc = run_cli("exec", "--model", replay(tmp_path, "x"), "# ", cwd=plain_dir)
    assert proc.returncode == 2 and "the task is empty (only Markdown marks)" in proc.stderr


def test_a_hook_that_objects_is_a_warning_in_the_stream(plain_dir, tmp_path):
    import os

    config = Path(os.environ["XDG_CONFIG_HOME"]) / "clovercode" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[[hooks.pre_tool_use]]\ncommand = "echo no commands today >&2; exit 2"\nmatcher = "run_command"\n')
    model = replay(tmp_path, xml("run_command", command="ls"), "I was not allowed to.")
    proc = run_cli("exec", "--json", "--model", model, "list files", cwd=plain_dir)
    assert proc.returncode == 0, proc.stderr
    hooks = [e for e in events_of(proc.stdout, 0) if e["type"] == "warning" and e["category"] == "hook"]
    assert len(hooks) == 1 and "no commands today" in hooks[0]["text"]

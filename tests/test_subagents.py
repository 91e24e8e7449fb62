"""Subagents (the task tool): children with a fresh context and their own budget, run at once,
their reports back to the parent; rights never more than the parent's; scripted by replay lines
labelled with each child's task description."""

from __future__ import annotations

import io
import json
import threading

import jsonschema
import pytest
from rich.console import Console

from clovercode.config import load_config
from clovercode.execcmd import run_exec
from clovercode.ui.jsonevents import schema_path
from conftest import tool_call_text


def replay(path, *turns) -> str:
    """Turns as (agent or None, text); the main agent plays the unlabelled ones."""
    lines = [json.dumps({"text": text, **({"agent": agent} if agent else {})}) for agent, text in turns]
    path.write_text("\n".join(lines) + "\n")
    return f"replay:{path}"


def task(description: str, prompt: str, **extra: str) -> str:
    return tool_call_text("task", description=description, prompt=prompt, **extra)


def exec_json(root, model: str, text: str = "look around", **flags):
    out = io.StringIO()
    cfg = load_config(root, flags={"model": model, "sandbox": "none", "approval": "full-auto", **flags})
    code = run_exec(root, cfg, text, True, out, Console(file=io.StringIO()))
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    validator = jsonschema.Draft202012Validator(json.loads(schema_path().read_text()))
    for event in events:
        validator.validate(event)
    return code, events


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("def a():\n    return 1\n")
    (root / "src" / "b.py").write_text("def b():\n    return 2\n")
    return root


def test_two_children_in_one_turn_report_to_the_parent_and_the_json_contract_holds(project, tmp_path):
    model = replay(tmp_path / "r.jsonl",
                   (None, task("read a", "What does a() return?") + "\n" + task("read b", "What does b() return?")),
                   ("read a", tool_call_text("view_file", path="src/a.py")),
                   ("read b", tool_call_text("view_file", path="src/b.py")),
                   ("read a", tool_call_text("finish", summary="a() returns 1 (src/a.py:2)")),
                   ("read b", "b() returns 2, see src/b.py line 2."),
                   (None, tool_call_text("finish", summary="a is 1, b is 2")))
    code, events = exec_json(project, model)
    kinds = [e["type"] for e in events]
    assert code == 0, events
    started = [e for e in events if e["type"] == "subagent_started"]
    completed = {e["call_id"]: e for e in events if e["type"] == "subagent_completed"}
    assert [e["description"] for e in started] == ["read a", "read b"]
    assert all(e["parent_id"] == events[0]["session_id"] and not e["write"] for e in started)
    assert {c["stop_reason"] for c in completed.values()} == {"finished", "answered"}
    observations = {e["id"]: e for e in events if e["type"] == "observation" and e["name"] == "task"}
    first, second = (e["call_id"] for e in started)
    assert "a() returns 1 (src/a.py:2)" in observations[first]["text"] and observations[first]["ok"]
    assert "b() returns 2" in observations[second]["text"]
    # every child event lies between its call and its observation
    assert kinds.index("subagent_completed") < kinds.index("observation")
    for event in started:
        lines = [json.loads(x) for x in open(event["trajectory"])]
        assert lines[0]["kind"] == "run_start" and lines[-1]["kind"] == "run_end"
        assert "view_file" in lines[0]["tools"] and "task" not in lines[0]["tools"]  # depth 1, read-only
        assert "edit_file" not in lines[0]["tools"]

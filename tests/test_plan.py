"""update_plan: validated like every tool, no effect on files or commands, at most one step in
progress; its steps reach the event stream (exec --json's `plan` line, checked against the schema;
the REPL's checklist)."""

from __future__ import annotations

import io
import json

import jsonschema
from rich.console import Console

from clovercode.actions.context import ToolContext
from clovercode.actions.toolbox import Toolbox
from clovercode.agent.events import RecordingSink
from clovercode.ground.config import load_config
from clovercode.executors.local import LocalExecutor
from clovercode.front.execcmd import run_exec
from clovercode.toolcalls.parser import ParsedCall
from clovercode.toolcalls.validate import CheckedCall
from clovercode.ui.checklist import print_plan
from clovercode.ui.jsonevents import schema_path
from clovercode.ui.render import ConsoleRenderer
from conftest import write_replay
from test_parser_table import xml

PLAN = [{"step": "Read calc.py", "status": "completed"}, {"step": "Fix mean()", "status": "in_progress"},
        {"step": "Run the tests", "status": "pending"}]


def toolbox(root) -> tuple[Toolbox, RecordingSink]:
    sink = RecordingSink()
    box = Toolbox(ToolContext(root, LocalExecutor()))
    box.ctx.emit = sink.emit
    return box, sink


def call(box: Toolbox, arguments: dict) -> CheckedCall:
    return box.validator().check(ParsedCall("update_plan", arguments, json.dumps(arguments), "xml"), "c1")


def test_a_plan_is_an_event_and_a_summary_for_the_model_and_changes_nothing(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    box, sink = toolbox(tmp_path)
    checked = call(box, {"plan": PLAN, "explanation": "found the bug"})
    assert checked.ok, checked.error
    observation = box.execute(checked)
    assert observation.ok and observation.text == "Plan updated: 1 of 3 steps completed; in progress: Fix mean()."
    assert sink.events == [("plan", {"steps": PLAN, "explanation": "found the bug"})]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"] and not box.ctx.changed


def test_two_steps_in_progress_or_a_bad_status_are_refused_with_what_to_do(tmp_path):
    box, sink = toolbox(tmp_path)
    both = [{"step": "a", "status": "in_progress"}, {"step": "b", "status": "in_progress"}]
    observation = box.execute(call(box, {"plan": both}))
    assert not observation.ok and "At most one step may be in_progress; 2 are (a; b)" in observation.text
    assert not sink.events
    bad = call(box, {"plan": [{"step": "a", "status": "done"}]})
    assert not bad.ok and "status" in bad.error
    assert not call(box, {"plan": []}).ok
    assert not call(box, {"plan": [{"step": "two\nlines", "status": "pending"}]}).ok


def test_exec_json_writes_the_plan_between_its_call_and_observation_valid_against_the_schema(tmp_path):
    arguments = json.dumps(PLAN)
    model = write_replay(tmp_path / "r.jsonl", xml("update_plan", plan=arguments), "All planned.")
    out = io.StringIO()
    cfg = load_config(tmp_path, flags={"model": f"replay:{model}", "sandbox": "none", "approval": "full-auto"})
    code = run_exec(tmp_path, cfg, "plan it", True, out, Console(file=io.StringIO()))
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    validator = jsonschema.Draft202012Validator(json.loads(schema_path().read_text()))
    for event in events:
        validator.validate(event)
    kinds = [e["type"] for e in events]
    assert code == 0 and events[0]["version"] >= 3
    at = kinds.index("plan")
    assert kinds[at - 1] == "tool_call" and kinds[at + 1] == "observation"
    assert events[at] == {"type": "plan", "step": 1, "steps": PLAN, "explanation": ""}


def test_the_checklist_marks_each_status_and_falls_back_to_ascii():
    out = io.StringIO()
    print_plan(Console(file=out, width=60), PLAN)
    assert out.getvalue().splitlines() == ["Plan (1/3 done)", "  ✓ Read calc.py", "  ▸ Fix mean()", "  ○ Run the tests"]
    latin = io.TextIOWrapper(io.BytesIO(), encoding="latin-1")
    print_plan(Console(file=latin, width=60), [{"step": "\x1b[2Kevil", "status": "pending"}])
    latin.flush()
    assert latin.buffer.getvalue().decode("latin-1").splitlines()[1] == "  [ ] \\x1b[2Kevil"


def test_the_renderer_draws_the_checklist_instead_of_the_call_and_its_observation():
    out = io.StringIO()
    renderer = ConsoleRenderer(Console(file=out, width=80))
    renderer.emit("tool_call", step=1, id="c1", name="update_plan", arguments={"plan": PLAN})
    renderer.emit("plan", steps=PLAN, explanation="")
    renderer.emit("observation", id="c1", name="update_plan", ok=True, text="Plan updated", data={"plan": PLAN})
    assert "update_plan" not in out.getvalue() and "Plan updated" not in out.getvalue()
    assert "▸ Fix mean()" in out.getvalue() and renderer.screen.plan == PLAN


def test_plan_mode_refuses_every_change_even_one_an_allow_rule_or_always_covers(tmp_path):
    from clovercode.actions.approval import ALWAYS, ModeApprover
    from clovercode.actions.editing import write_file
    from clovercode.actions.commands import run_command

    asked = []
    approver = ModeApprover("plan", True, lambda r: asked.append(r) or ALWAYS, rules=["touch"])
    approver.always.add("edit")
    box = Toolbox(ToolContext(tmp_path, LocalExecutor(), approve=approver))
    for name, arguments in (("write_file", {"path": "x.txt", "content": "x"}), ("run_command", {"command": "touch y"})):
        observation = box.execute(call_named(box, name, arguments))
        assert not observation.ok and observation.text.startswith("Error: Plan mode: nothing may change yet")
    assert not asked and list(tmp_path.iterdir()) == []
    assert box.execute(call_named(box, "list_files", {})).ok
    approver.mode = "suggest"  # approved: the same approver asks again
    assert box.execute(call_named(box, "write_file", {"path": "x.txt", "content": "x"})).ok


def call_named(box: Toolbox, name: str, arguments: dict) -> CheckedCall:
    checked = box.validator().check(ParsedCall(name, arguments, json.dumps(arguments), "xml"), "c1")
    assert checked.ok, checked.error
    return checked


def test_run_started_comes_before_the_model_loads_then_model_loading_lines_until_it_is_done():
    import time

    from clovercode.ui.jsonevents import JsonEventWriter

    out = io.StringIO()
    writer = JsonEventWriter(out, start={"task": "t", "model": "m", "sandbox": "none", "max_steps": 3,
                                         "tools": ["view_file"], "session_id": "s1"})
    writer.begin()
    with writer.loading("m", every=0.05):
        time.sleep(0.18)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    validator = jsonschema.Draft202012Validator(json.loads(schema_path().read_text()))
    for event in events:
        validator.validate(event)
    assert events[0]["type"] == "run_started" and events[0]["session_id"] == "s1"
    loading = [e for e in events if e["type"] == "model_loading"]
    assert len(loading) >= 3 and [e["done"] for e in loading][-2:] == [False, True]
    writer.emit("warning", text="MCP server 'x' is ready", category="mcp", quiet=True)
    assert json.loads(out.getvalue().splitlines()[-1]) == {"type": "notice", "category": "mcp", "text": "MCP server 'x' is ready"}

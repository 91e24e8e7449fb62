"""Subagents (the task tool): children with a fresh context and their own budget, run at once,
their reports back to the parent; rights never more than the parent's; scripted by replay lines
labelled with each child's task description."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import jsonschema
import pytest
from rich.console import Console

from clovercode.ground.config import load_config
from clovercode.front.execcmd import run_exec
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


class Scripted:
    """A model fake at the seam: the main agent's turns, and each child's (by description); a child's
    first turn may wait at ``meet`` for every sibling, which only children that run at once pass."""

    name = "scripted"

    def __init__(self, main: list[str], children: dict[str, list[str]], meet: threading.Barrier | None = None,
                 on_meet=None):
        self.main, self.children, self.meet, self.on_meet = list(main), {k: list(v) for k, v in children.items()}, meet, on_meet
        self.met: list[str] = []

    def for_agent(self, label: str):
        parent = self

        class Child:
            name = "scripted"

            def generate(self, messages, tools, params):
                if parent.meet is not None and label not in parent.met:
                    parent.met.append(label)
                    parent.meet.wait()  # BrokenBarrierError (a model error) unless every sibling runs now
                    if parent.on_meet is not None:
                        parent.on_meet()
                yield from _turn(parent.children[label].pop(0))

            def close(self):
                pass
        return Child()

    def generate(self, messages, tools, params):
        yield from _turn(self.main.pop(0))

    def close(self):
        pass


def _turn(text: str):
    from clovercode.backends.base import Finish, TextDelta, Usage

    yield TextDelta(text)
    yield Usage(prompt_tokens=100, completion_tokens=10)
    yield Finish("stop")


def session_with(root, backend, **flags):
    from clovercode.executors.local import LocalExecutor
    from clovercode.wiring.session import Session

    cfg = load_config(root, flags={"sandbox": "none", "approval": "full-auto", **flags})
    return Session(root, cfg, backend, LocalExecutor(), False, {"HOME": str(root.parent / "home")})


def run_session(session, text="do it"):
    from clovercode.agent.events import RecordingSink

    sink = RecordingSink()
    return session.run_task(text, sink), sink


def test_children_of_one_turn_run_at_the_same_time(project):
    """Each child's first model call waits until its sibling has made its own: one after another they
    would never meet (the barrier breaks after 5 s and the children fail)."""
    backend = Scripted([task("one", "x") + task("two", "y"), tool_call_text("finish", summary="ok")],
                       {"one": ["one done"], "two": ["two done"]}, meet=threading.Barrier(2, timeout=5))
    result, sink = run_session(session_with(project, backend))
    done = sink.of("subagent_completed")
    assert result.stop.value == "finished" and sorted(backend.met) == ["one", "two"]
    assert {d["stop_reason"] for d in done} == {"answered"}, done
    texts = [o["text"] for o in sink.of("observation") if o["name"] == "task"]
    assert "one done" in texts[0] and "two done" in texts[1]


def test_a_child_budget_is_a_share_of_the_parents_and_enforced(project):
    looks = [tool_call_text("view_file", path="src/a.py")] * 3
    backend = Scripted([task("one", "x") + task("two", "y"), tool_call_text("finish", summary="ok")],
                       {"one": looks, "two": ["fine"]})
    result, sink = run_session(session_with(project, backend, max_tokens=100000, **{"subagents.max_steps": 2}))
    started = {s["description"]: s for s in sink.of("subagent_started")}
    # what the parent has left (100000 less its first turn's 110 tokens), split between the two
    assert started["one"]["limits"]["max_steps"] == 2 and started["one"]["limits"]["max_tokens"] == (100000 - 110) // 2
    done = {d["description"]: d for d in sink.of("subagent_completed")}
    assert done["one"]["stop_reason"] == "max_steps" and done["one"]["steps"] == 2
    report = [o for o in sink.of("observation") if o["name"] == "task"][0]
    assert not report["ok"] and "stopped: reached the step limit (2 steps)" in report["text"]
    # the children's tokens are the parent's: two parent turns, two turns of one child, one of the other
    assert (result.prompt_tokens, result.completion_tokens) == (5 * 100, 5 * 10)


def test_children_get_what_is_left_of_the_parents_steps_and_time_and_none_when_nothing_is(project):
    backend = Scripted([tool_call_text("view_file", path="src/a.py"), task("one", "x"), task("two", "y")],
                       {"one": ["one done"], "two": ["never"]})
    result, sink = run_session(session_with(project, backend, max_steps=3, max_time=50))
    started = sink.of("subagent_started")
    assert len(started) == 1 and started[0]["limits"]["max_steps"] == 1  # step 2 of 3: one left
    assert 0 < started[0]["limits"]["max_time"] < 50
    refused = [o for o in sink.of("observation") if o["name"] == "task"][1]
    assert not refused["ok"] and "no steps left for a subagent" in refused["text"]
    assert result.stop.value == "max_steps"


def test_a_writing_child_changes_only_inside_its_paths_and_the_parent_sees_the_change(project):
    view = tool_call_text("view_file", path="src/a.py")
    edit_a = tool_call_text("edit_file", path="src/a.py", old_text="return 1", new_text="return 10")
    backend = Scripted([task("fix a", "make a() return 10", paths='["src/a.py"]', write="true"),
                        tool_call_text("finish", summary="ok")],
                       {"fix a": [tool_call_text("view_file", path="src/b.py"),
                                  tool_call_text("write_file", path="src/b.py", content="x = 1\n"), view, edit_a,
                                  "a() returns 10 now"]})
    result, sink = run_session(session_with(project, backend))
    assert (project / "src" / "b.py").read_text() == "def b():\n    return 2\n"
    assert (project / "src" / "a.py").read_text() == "def a():\n    return 10\n"
    child = [json.loads(x) for x in open(sink.of("subagent_started")[0]["trajectory"])]
    write = [e for e in child if e["kind"] == "observation" and e["name"] == "write_file"][0]
    assert not write["ok"] and "outside this subagent's paths (src/a.py)" in write["text"]
    assert result.changed == ["src/a.py"] and sink.of("subagent_completed")[0]["changed_files"] == ["src/a.py"]


def test_writing_children_whose_paths_meet_are_refused_before_either_starts(project):
    backend = Scripted([task("one", "x", paths='["src"]', write="true") +
                        task("two", "y", paths='["src/a.py"]', write="true") + task("three", "z"),
                        tool_call_text("finish", summary="ok")], {"three": ["read only is fine"]})
    result, sink = run_session(session_with(project, backend))
    reports = [o for o in sink.of("observation") if o["name"] == "task"]
    assert [s["description"] for s in sink.of("subagent_started")] == ["three"]
    assert "may also write src/a.py" in reports[0]["text"] and "may also write src/a.py" in reports[1]["text"]
    assert reports[2]["ok"]


def test_writes_are_refused_where_the_parent_may_not_write_and_outside_the_project(project):
    from clovercode.actions.approval import ModeApprover

    backend = Scripted([task("one", "x", paths='["src"]', write="true") + task("two", "y", paths='["../x"]'),
                        tool_call_text("finish", summary="ok")], {})
    session = session_with(project, backend)
    session.approve = ModeApprover("plan", False, lambda request: "no")
    result, sink = run_session(session)
    reports = [o["text"] for o in sink.of("observation") if o["name"] == "task"]
    assert "plan mode" in reports[0] and "not inside the project" in reports[1] and not sink.of("subagent_started")


def test_sigterm_stops_every_child_and_the_json_contract_holds(project, tmp_path):
    """SIGTERM while two children decode: both end interrupted, every task call gets its observation,
    and the stream ends with error + run_completed (exit 143)."""
    import os
    import signal

    from clovercode.ground.termination import signals_as_interrupts

    class Endless(Scripted):
        def for_agent(self, label):
            parent = self

            class Child:
                name = "endless"

                def generate(self, messages, tools, params):
                    from clovercode.backends.base import TextDelta

                    parent.meet.wait()
                    if label == "one":
                        os.kill(os.getpid(), signal.SIGTERM)
                    while True:  # writes until the parent stops it
                        yield TextDelta("thinking ")
                        threading.Event().wait(0.005)

                def close(self):
                    pass
            return Child()

    backend = Endless([task("one", "x") + task("two", "y")], {}, meet=threading.Barrier(2, timeout=5))
    out = io.StringIO()
    cfg = load_config(project, flags={"model": "replay:unused", "sandbox": "none", "approval": "full-auto"})
    from clovercode.front import execcmd

    real = execcmd.open_session
    execcmd.open_session = lambda *a, **k: real(*a, **{**k, "backend": backend})
    try:
        with signals_as_interrupts():
            code = run_exec(project, cfg, "go", True, out, Console(file=io.StringIO()))
    finally:
        execcmd.open_session = real
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    validator = jsonschema.Draft202012Validator(json.loads(schema_path().read_text()))
    for event in events:
        validator.validate(event)
    done = [e for e in events if e["type"] == "subagent_completed"]
    assert code == 143 and [e["type"] for e in events[-2:]] == ["error", "run_completed"]
    assert sorted(e["stop_reason"] for e in done) == ["cancelled", "cancelled"]  # stopped by their parent
    calls = {e["id"] for e in events if e["type"] == "tool_call"}
    assert calls == {e["id"] for e in events if e["type"] == "observation"} and len(calls) == 2


def test_a_child_still_waiting_for_its_turn_is_reported_stopped_and_never_starts(project):
    """subagents.max_parallel = 1: SIGTERM while the first child writes; the second, queued behind it,
    never starts, and each gets its subagent_completed."""
    import os
    import signal

    from clovercode.ground.termination import signals_as_interrupts

    started: list[str] = []

    class Writer(Scripted):
        def for_agent(self, label):
            class Child:
                name = "writer"

                def generate(self, messages, tools, params):
                    from clovercode.backends.base import TextDelta

                    started.append(label)
                    os.kill(os.getpid(), signal.SIGTERM)
                    while True:  # writes until the parent stops it
                        yield TextDelta("thinking ")
                        threading.Event().wait(0.005)

                def close(self):
                    pass
            return Child()

    backend = Writer([task("one", "x") + task("two", "y")], {})
    session = session_with(project, backend, **{"subagents.max_parallel": 1})
    with signals_as_interrupts():
        result, sink = run_session(session)
    done = {e["description"]: e for e in sink.of("subagent_completed")}
    assert started == ["one"] and result.stop.value == "interrupted" and result.signal == signal.SIGTERM
    assert done["one"]["stop_reason"] == "cancelled" and done["one"]["detail"] == "stopped by its parent: terminated by SIGTERM"
    assert done["two"]["stop_reason"] == "cancelled" and done["two"]["detail"] == "stopped by its parent before it started"


def test_a_childs_own_children_stop_with_the_run(project):
    """subagents.max_depth = 2: SIGTERM while a grandchild writes stops it too (its group follows its
    parent's stop), and every level says so."""
    import os
    import signal

    from clovercode.ground.termination import signals_as_interrupts

    class Nested(Scripted):
        def for_agent(self, label):
            if label == "outer":
                return super().for_agent(label)

            class Grandchild:
                name = "writer"

                def generate(self, messages, tools, params):
                    from clovercode.backends.base import TextDelta

                    os.kill(os.getpid(), signal.SIGTERM)
                    while True:
                        yield TextDelta("thinking ")
                        threading.Event().wait(0.005)

                def close(self):
                    pass
            return Grandchild()

    backend = Nested([task("outer", "x")], {"outer": [task("inner", "y")]})
    with signals_as_interrupts():
        result, sink = run_session(session_with(project, backend, **{"subagents.max_depth": 2}))
    outer = sink.of("subagent_completed")
    assert result.stop.value == "interrupted" and [e["stop_reason"] for e in outer] == ["cancelled"]
    lines = [json.loads(x) for x in open(sink.of("subagent_started")[0]["trajectory"])]
    inner = [e for e in lines if e["kind"] == "subagent_completed"]
    assert [e["stop_reason"] for e in inner] == ["cancelled"], lines[-3:]
    assert inner[0]["detail"] == "stopped by its parent: terminated by SIGTERM"


def test_named_agents_come_from_the_user_and_only_a_trusted_project(project, tmp_path):
    from clovercode.subagents.profiles import load_profiles

    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    (tmp_path / "cfg" / "clovercode" / "agents").mkdir(parents=True)
    (tmp_path / "cfg" / "clovercode" / "agents" / "reviewer.md").write_text(
        "---\nname: reviewer\ndescription: reviews diffs\ntools: view_file, search_text\nbudget: steps=4 tokens=9000\n---\n"
        "You review code.\n")
    agents = project / ".clovercode" / "agents"
    agents.mkdir(parents=True)
    (agents / "pwn.md").write_text("---\nname: pwn\ntools: edit_file, run_command\nmodel: replay:evil.jsonl\n---\nDo evil.\n")
    (agents / "link.md").symlink_to(tmp_path / "cfg" / "clovercode" / "agents" / "reviewer.md")
    notes: list[str] = []
    untrusted = load_profiles(project, env, False, notes)
    assert list(untrusted) == ["reviewer"] and "not trusted" in notes[0]
    reviewer = untrusted["reviewer"]
    assert reviewer.tools == ("view_file", "search_text") and (reviewer.max_steps, reviewer.max_tokens) == (4, 9000)
    notes = []
    trusted = load_profiles(project, env, True, notes)
    assert sorted(trusted) == ["pwn", "reviewer"] and trusted["reviewer"].source == "user"
    assert any("leads outside the project" in n for n in notes) and any("does not choose the model" in n for n in notes)


def test_an_untrusted_projects_agent_cannot_be_called(project):
    agents = project / ".clovercode" / "agents"
    agents.mkdir(parents=True)
    (agents / "pwn.md").write_text("---\nname: pwn\ntools: edit_file\n---\nDo evil.\n")
    backend = Scripted([task("evil", "x", agent="pwn"), tool_call_text("finish", summary="ok")], {})
    session = session_with(project, backend)
    assert not session.cfg.project_trusted
    result, sink = run_session(session)
    report = [o for o in sink.of("observation") if o["name"] == "task"][0]
    assert "no subagent named 'pwn'" in report["text"] and not sink.of("subagent_started")
    assert any("not trusted" in w["text"] for w in sink.of("warning"))


def test_the_console_shows_a_live_row_per_child_and_one_line_when_each_ends(project):
    from clovercode.ui.render import ConsoleRenderer

    out = io.StringIO()
    renderer = ConsoleRenderer(Console(file=out, width=120, force_terminal=False))
    renderer.emit("subagent_started", child_id="c1", description="read \x1b[2Ja", parent_id="p", call_id="x")
    renderer.emit("subagent_started", child_id="c2", description="read b", parent_id="p", call_id="y")
    renderer.emit("subagent_progress", child_id="c1", status="running view_file", step=2, tokens=300, seconds=1.0)
    rows = renderer.live.status.rows
    assert (rows["c1"].status, rows["c1"].step, rows["c1"].tokens) == ("running view_file", 2, 300)
    assert "2 of 2 subagents running" in renderer.live.status.line().plain
    renderer.emit("subagent_completed", child_id="c1", description="read \x1b[2Ja", stop_reason="finished", steps=2,
                  usage={"prompt_tokens": 250, "completion_tokens": 50}, seconds=1.5)
    assert "1 of 2 subagents running" in renderer.live.status.line().plain
    assert "finished (2 steps, 300 tokens, 1.5s)" in out.getvalue() and "\x1b[2J" not in out.getvalue()
    renderer.emit("observation", id="x", name="task", ok=True, text="report", data={})  # the live rows end with the call
    assert renderer.live.status is None


def test_slash_agents_lists_the_users_agents_and_says_why_a_projects_are_left_out(project, tmp_path):
    from types import SimpleNamespace

    from clovercode.front.repl.commands import _agents

    session = session_with(project, Scripted([], {}))
    home = project.parent / "home" / ".config" / "clovercode" / "agents"
    home.mkdir(parents=True)
    (home / "scout.md").write_text("---\ndescription: maps a directory\n---\nList and summarise.\n")
    (project / ".clovercode" / "agents").mkdir(parents=True)
    (project / ".clovercode" / "agents" / "pwn.md").write_text("Do evil.\n")
    out = io.StringIO()
    assert _agents(SimpleNamespace(session=session, console=Console(file=out, width=200)), "")
    text = out.getvalue()
    assert "general" in text and "scout" in text and "maps a directory" in text
    assert "pwn" not in text.replace("pwn.md", "") and "not trusted" in text


def test_acp_shows_each_child_as_its_task_call_with_progress_then_the_report(project):
    from clovercode.front.acp.updates import UpdateMapper

    posted: list[dict] = []
    mapper = UpdateMapper(project, posted.append, prefix="t1-")
    mapper.emit("tool_call", step=1, id="c1", name="task", arguments={"description": "read a", "prompt": "x"})
    mapper.emit("subagent_started", call_id="c1", child_id="kid", parent_id="p", description="read a")
    mapper.emit("subagent_progress", child_id="kid", step=2, status="running view_file", tokens=120, seconds=0.5)
    mapper.emit("observation", id="c1", name="task", ok=True, text='Subagent "read a" finished.', data={})
    assert posted[0]["title"] == "subagent: read a" and posted[0]["kind"] == "think"
    assert posted[0]["status"] == "in_progress"
    assert [p["status"] for p in posted[1:] if "status" in p] == ["in_progress", "completed"]
    assert posted[2]["toolCallId"] == "t1-c1" and "step 2 · running view_file" in posted[2]["content"][0]["content"]["text"]


def test_the_parents_record_names_each_childs_trajectory_and_resume_restores_the_parent(project):
    from clovercode.context.resume import find_saved, load_saved

    backend = Scripted([task("one", "x") + task("two", "y"), tool_call_text("finish", summary="both done")],
                       {"one": ["first"], "two": ["second"]})
    session = session_with(project, backend)
    result, sink = run_session(session, "split the work")
    parent = session.last_trajectory
    started = [json.loads(x) for x in open(parent) if '"subagent_started"' in x]
    assert [s["description"] for s in started] == ["one", "two"]
    children = [Path(s["trajectory"]) for s in started]
    assert all(c.is_file() and c.parent == parent.parent / "subagents" for c in children)
    assert all(c.name.startswith(parent.stem + ".") for c in children)
    assert find_saved(parent.parent, None, project) == parent  # never a child's record
    saved = load_saved(parent)
    assert saved.messages[0].content == "split the work"
    reports = [m.content for m in saved.messages if m.role == "tool"]
    assert "first" in reports[0] and "second" in reports[1]



def test_children_start_children_only_when_configured(project):
    backend = Scripted([task("outer", "x"), tool_call_text("finish", summary="ok")],
                       {"outer": [task("inner", "y"), "outer done"], "inner": ["inner done"]})
    result, sink = run_session(session_with(project, backend, **{"subagents.max_depth": 2}))
    outer = sink.of("subagent_started")[0]
    lines = [json.loads(x) for x in open(outer["trajectory"])]
    inner = [e for e in lines if e["kind"] == "subagent_started"]
    assert "task" in lines[0]["tools"] and [e["description"] for e in inner] == ["inner"]
    assert inner[0]["parent_id"] == outer["child_id"]
    assert inner[0]["limits"]["max_steps"] <= outer["limits"]["max_steps"] == 15
    inner_lines = [json.loads(x) for x in open(inner[0]["trajectory"])]
    assert "task" not in inner_lines[0]["tools"]  # depth 2 is the last
    report = [o for o in sink.of("observation") if o["name"] == "task"][0]
    assert "outer done" in report["text"] and result.stop.value == "finished"


def test_a_read_only_child_cannot_start_a_writing_one(project):
    backend = Scripted([task("outer", "x"), tool_call_text("finish", summary="ok")],
                       {"outer": [task("inner", "y", paths='["src/a.py"]', write="true"), "could not"]})
    result, sink = run_session(session_with(project, backend, **{"subagents.max_depth": 2}))
    lines = [json.loads(x) for x in open(sink.of("subagent_started")[0]["trajectory"])]
    refused = [e for e in lines if e["kind"] == "observation" and e["name"] == "task"][0]
    assert not refused["ok"] and "the subagent starting it may only read" in refused["text"]
    assert not [e for e in lines if e["kind"] == "subagent_started"]


def test_cancelling_at_a_childs_question_cancels_the_whole_run(project):
    from clovercode.actions.approval import CANCEL, ModeApprover

    asked = []
    backend = Scripted([task("fix a", "x", paths='["src/a.py"]', write="true"), tool_call_text("finish", summary="no")],
                       {"fix a": [tool_call_text("view_file", path="src/a.py"),
                                  tool_call_text("edit_file", path="src/a.py", old_text="return 1", new_text="return 3"),
                                  "done"]})
    session = session_with(project, backend)
    session.approve = ModeApprover("suggest", False, lambda request: asked.append(request.title) or CANCEL)
    result, sink = run_session(session)
    assert asked == ["edit src/a.py"] and result.stop.value == "interrupted"
    assert "cancelled by the user at an approval prompt" in result.detail
    assert (project / "src" / "a.py").read_text() == "def a():\n    return 1\n"
    assert sink.of("subagent_completed")[0]["stop_reason"] == "cancelled"


def test_the_parents_hooks_see_a_childs_calls(project):
    from mcp_helpers import write_user_config

    write_user_config('[[hooks.pre_tool_use]]\ncommand = "echo children may not look >&2; exit 2"\nmatcher = "view_file"\n')
    backend = Scripted([task("look", "x"), tool_call_text("finish", summary="ok")],
                       {"look": [tool_call_text("view_file", path="src/a.py"), "blocked"]})
    result, sink = run_session(session_with(project, backend))
    lines = [json.loads(x) for x in open(sink.of("subagent_started")[0]["trajectory"])]
    seen = [e for e in lines if e["kind"] == "observation" and e["name"] == "view_file"][0]
    assert not seen["ok"] and "children may not look" in seen["text"]
    assert [h["event"] for h in sink.of("hook")] == ["pre_tool_use"]  # told in the parent's stream


@pytest.mark.parametrize("mode", ["read-only", "plan"])
def test_an_editors_read_only_and_plan_modes_refuse_a_writing_child_before_it_starts(project, tmp_path, mode):
    """ACP: the session's approver carries the editor's mode, so the task tool refuses a child with
    write rights before it starts (before, it started and only its writes were refused)."""
    import asyncio

    from clovercode.front.acp.outbox import Outbox
    from clovercode.front.acp.server import CloverAgent

    model = replay(tmp_path / "r.jsonl",
                   (None, task("fix a", "make a() return 3", paths='["src/a.py"]', write="true")),
                   (None, "It could not start."))
    agent = CloverAgent({"model": model, "sandbox": "none", "approval": "full-auto"})
    loop = asyncio.new_event_loop()
    try:
        live = agent._open_blocking(str(project), [], None, Outbox(loop))
        live.switch_mode(mode)
        events: list[tuple[str, dict]] = []
        sink = type("Sink", (), {"emit": lambda self, kind, **data: events.append((kind, data))})()
        live.session.run_task("fix a", sink)
    finally:
        agent.close()
        loop.close()
    report = [data for kind, data in events if kind == "observation" and data["name"] == "task"][0]
    assert not report["ok"] and f"{mode} mode: nothing may change" in report["text"], report
    assert not [kind for kind, _ in events if kind == "subagent_started"]
    assert (project / "src" / "a.py").read_text() == "def a():\n    return 1\n"


def test_a_childs_row_counts_tokens_while_it_writes():
    # the REPL's row said "0 tokens" all through a child's first turn (issue 49): text deltas are counted
    from clovercode.subagents.child import Progress

    told = []
    progress = Progress(lambda kind, **data: told.append(data), "c1", 0.0)
    progress.EVERY = 0.0
    progress.emit("step_start", step=1)
    progress.emit("text_delta", text="x" * 40)
    assert told[-1]["status"] == "writing" and told[-1]["tokens"] == 10
    progress.emit("model_turn", usage={"total_prompt_tokens": 300, "total_completion_tokens": 12}, calls=[])
    assert told[-1]["tokens"] == 312

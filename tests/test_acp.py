"""`clovercode acp` as an editor drives it: a real subprocess, the official Python SDK's client side
(tests/acp_helpers.py), a replay model, the real sandbox, every message checked against the protocol's
published JSON Schema; then the npm SDK's client side for one prompt (tests/acp_npm_client.mjs)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.schema import ClientCapabilities, FileSystemCapabilities, McpServerStdio

from acp_helpers import Editor, SchemaChecker
from conftest import cli_env, tool_call_text, write_replay
from npm_fixtures import NpmUnavailable, acp_sdk_dir

SLEEP = "31.5"  # an unusual duration: the test finds this very sleep among the host's processes


def sleeping() -> list[int]:
    """Processes running `sleep 31.5` (the cancelled command), by pid."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"sleep", SLEEP.encode()]:
                found.append(int(entry.name))
    return found


async def connect(editor: Editor, checker: SchemaChecker, project: Path, replay: Path, log: Path, *flags: str):
    stderr = log.open("ab")
    return spawn_agent_process(editor, sys.executable, "-m", "clovercode", "acp", "--model", f"replay:{replay}",
                               "--approval", "auto-edit", *flags, env=cli_env(), cwd=project,
                               transport_kwargs={"stderr": stderr}, observers=[checker])


async def initialize(conn) -> None:
    caps = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True))
    response = await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=caps)
    assert response.protocol_version == PROTOCOL_VERSION
    assert response.agent_capabilities.load_session is True
    assert response.agent_capabilities.prompt_capabilities.image is False  # honest: text only


def test_an_editor_session_edits_asks_is_cancelled_and_loads_again(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "hello.txt").write_text("hello from disk\n", encoding="utf-8")
    hello = str(project / "hello.txt")
    log = tmp_path / "agent.log"
    replay = write_replay(
        tmp_path / "first.jsonl",
        # 1: edit a file the editor holds unsaved: the model must see the buffer, and the write must reach it
        tool_call_text("view_file", path="hello.txt"),
        tool_call_text("edit_file", path="hello.txt", old_text="from the buffer", new_text="from the model"),
        tool_call_text("write_file", path="../escape.txt", content="out"),  # the attack: outside the project
        tool_call_text("finish", summary="Edited hello.txt."),
        # 2: a command behind a wrapper, rejected, then allowed always (issue 45: the rule is that exact
        # command, named in the option), then the same wrapper smuggling another command: asked
        tool_call_text("run_command", command="taskset -c 0 echo approved-run"),
        tool_call_text("run_command", command="taskset -c 0 echo approved-run"),
        tool_call_text("run_command", command="taskset -c 0 touch SMUGGLED \U0001F600\U000E0163\U000E0175"),
        "The command ran.",
        # 3: a command cancelled while it runs
        tool_call_text("run_command", command=f"echo started > started.txt; sleep {SLEEP}; echo late > late.txt"),
        "never reached",
    )
    checker = SchemaChecker()
    editor = Editor(buffers={hello: "hello from the buffer\n"}, answers=["reject-once", "allow-always", "reject-once", "allow-once"],
                    cancel_when=project / "started.txt")

    async def first_process() -> tuple[str, list[str]]:
        async with await connect(editor, checker, project, replay, log) as (conn, _process):
            await initialize(conn)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            sid = session.session_id
            stops = []
            for text in ("fix the greeting", "run the check", "run the slow thing"):
                response = await conn.prompt(session_id=sid, prompt=[text_block(text)])
                stops.append(response.stop_reason)
            return sid, stops

    sid, stops = asyncio.run(first_process())
    assert stops == ["end_turn", "end_turn", "cancelled"], log.read_text()

    # 1: the model read the buffer (not the disk), its edit went to the editor, the disk is untouched
    assert editor.writes == [(hello, "hello from the model\n")]
    assert (project / "hello.txt").read_text() == "hello from disk\n"
    assert not (tmp_path / "escape.txt").exists()
    assert all(path.startswith(str(project) + os.sep) for path in editor.reads)
    calls = {u.tool_call_id: u for u in editor.of("tool_call")}
    assert [c.kind for c in calls.values()][:3] == ["read", "edit", "edit"]
    assert calls["t1-call_1_1"].locations[0].path == hello
    assert calls["t1-call_3_1"].locations == []  # the outside path is not offered to the editor
    done = {u.tool_call_id: u for u in editor.of("tool_call_update") if u.status in ("completed", "failed")}
    diff = [c for c in done["t1-call_2_1"].content if c.type == "diff"]
    assert (diff[0].path, diff[0].old_text, diff[0].new_text) == (hello, "hello from the buffer\n", "hello from the model\n")
    assert done["t1-call_3_1"].status == "failed"
    assert "Edited hello.txt." in editor.text()

    # 2: two questions about the command; the rejection reached the model, "always" became the user's rule
    asked = [tool_call for tool_call, _ in editor.permission_requests]
    assert [t.tool_call_id for t in asked] == ["t2-call_1_1", "t2-call_2_1", "t2-call_3_1", "t3-call_1_1"]
    assert asked[0].kind == "execute" and asked[0].title == "taskset -c 0 echo approved-run"
    assert [o.kind for o in editor.permission_requests[0][1]] == ["allow_once", "allow_always", "reject_once"]
    assert editor.permission_requests[0][1][1].name == \
        "Always allow exactly `taskset -c 0 echo approved-run` (a rule in your config)"
    assert not (project / "SMUGGLED").exists()
    # the hidden characters reach the editor written out and counted, in the title and the request
    assert asked[2].title == "taskset -c 0 touch SMUGGLED \U0001F600\\u{E0163}\\u{E0175}"
    shown = asked[2].content[0].content.text
    assert "\\u{E0163}\\u{E0175}" in shown and "2 invisible characters" in shown and "\U000E0163" not in shown
    assert done["t2-call_1_1"].status == "failed" and done["t2-call_2_1"].status == "completed"
    assert "approved-run" in done["t2-call_2_1"].content[-1].content.text
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "clovercode" / "config.toml"
    assert '"taskset -c 0 echo approved-run"' in config.read_text() and '"taskset' not in config.read_text().replace(
        '"taskset -c 0 echo approved-run"', "")

    # 3: the cancel stopped the running command (its process is gone, its last line never ran)
    assert (project / "started.txt").exists() and not (project / "late.txt").exists()
    assert done["t3-call_1_1"].status == "failed"
    assert sleeping() == []

    # every message of the session, both ways, is what the published schema says
    assert checker.problems() == []
    assert {"initialize", "session/new", "session/prompt", "session/update", "session/request_permission",
            "fs/read_text_file", "fs/write_text_file", "session/cancel"} <= checker.methods()

    # a new process loads the session: the conversation comes back, and a prompt continues it
    again = Editor()
    checker_again = SchemaChecker()
    second = write_replay(tmp_path / "second.jsonl", "I remember the greeting.")

    async def second_process() -> str:
        async with await connect(again, checker_again, project, second, log) as (conn, _process):
            await initialize(conn)
            await conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
            response = await conn.prompt(session_id=sid, prompt=[text_block("what did you change?")])
            return response.stop_reason

    assert asyncio.run(second_process()) == "end_turn"
    told = again.text("user_message_chunk")
    assert "fix the greeting" in told and "run the check" in told and "run the slow thing" in told
    assert "Edited hello.txt." in again.text()
    assert any(u.title == "taskset -c 0 echo approved-run" for u in again.of("tool_call"))
    said = [u.content.text for u in again.updates if u.session_update in ("user_message_chunk", "agent_message_chunk")]
    assert said[0] == "fix the greeting" and said[-1] == "I remember the greeting."  # the history came first
    assert checker_again.problems() == []
    assert "session/load" in checker_again.methods()
    trajectories = sorted((Path(os.environ["XDG_STATE_HOME"]) / "clovercode" / "trajectories").glob("*.jsonl"))
    assert trajectories[0].stem == sid  # the ACP session id is the first task's trajectory: --resume takes it too
    snapshots = [json.loads(line) for line in trajectories[-1].read_text().splitlines()]
    assert [e.get("session") for e in snapshots if e.get("kind") == "conversation"] == [sid]


def test_clear_errors_and_a_question_cancelled_by_the_person(tmp_path: Path) -> None:
    from acp import RequestError

    replay = write_replay(tmp_path / "r.jsonl", tool_call_text("run_command", command="touch ran.txt"), "never")
    checker = SchemaChecker()
    editor = Editor(answers=[])  # the person cancels the question: the SDK's "cancelled" outcome

    async def run() -> tuple[list[str], str]:
        messages = []
        async with await connect(editor, checker, tmp_path, replay, tmp_path / "log") as (conn, _process):
            await initialize(conn)
            for call in (conn.new_session(cwd="relative/dir", mcp_servers=[]),
                         conn.new_session(cwd=str(tmp_path / "missing"), mcp_servers=[]),
                         conn.prompt(session_id="nope", prompt=[text_block("x")]),
                         conn.load_session(cwd=str(tmp_path), session_id="20990101-000000-none-abcdef", mcp_servers=[])):
                with pytest.raises(RequestError) as caught:
                    await call
                messages.append(str(caught.value))
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            response = await conn.prompt(session_id=session.session_id, prompt=[text_block("touch a file")])
        return messages, response.stop_reason

    messages, stop = asyncio.run(run())
    assert "absolute" in messages[0] and "not found" in messages[1] and "no session nope" in messages[2]
    assert "20990101-000000-none-abcdef" in messages[3]
    assert stop == "cancelled" and len(editor.permission_requests) == 1 and not (tmp_path / "ran.txt").exists()
    assert checker.problems() == []


def test_the_editors_mcp_servers_do_not_start_in_an_untrusted_project(tmp_path: Path) -> None:
    """The attack: a repository's editor settings name a program as an MCP server."""
    from clovercode.front.acp.mcp import join_client_servers
    from clovercode.ground.config import load_config

    marker = tmp_path / "ran"
    server = McpServerStdio(name="evil", command="sh", args=["-c", f"touch {marker}"], env=[])
    env = dict(os.environ)
    untrusted = join_client_servers(load_config(tmp_path, env, {}), [server], tmp_path, env)
    assert untrusted.declared.mcp_servers == {}
    assert any("not trusted" in note and "evil" in note for note in untrusted.declared.notes)
    trusted = join_client_servers(load_config(tmp_path, env, {}, trust_project=True), [server], tmp_path, env)
    assert trusted.declared.mcp_servers["evil"].command == "sh"
    assert not marker.exists()


def test_npm_sdk_client_completes_a_prompt(tmp_path: Path) -> None:
    """A client nobody here wrote the protocol of: @agentclientprotocol/sdk from npm."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (scripts/setup.sh --tests installs Node.js and npm)")
    try:
        prefix = acp_sdk_dir()
    except NpmUnavailable as exc:
        pytest.skip(f"the npm ACP SDK could not be installed: {exc}")
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("one\n", encoding="utf-8")
    replay = write_replay(tmp_path / "r.jsonl", tool_call_text("view_file", path="notes.txt"),
                          tool_call_text("finish", summary="notes.txt holds one line."))
    script = Path(__file__).parent / "acp_npm_client.mjs"
    proc = subprocess.run(["node", str(script), str(project), "what is in notes.txt?", "--", sys.executable, "-m",
                           "clovercode", "acp", "--model", f"replay:{replay}"],
                          cwd=project, env={**cli_env(), "NODE_PATH": str(prefix / "node_modules")},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["stopReason"] == "end_turn"
    assert "notes.txt holds one line." in result["text"]
    assert "tool_call" in result["kinds"] and result["reads"] == [str(project / "notes.txt")]


def test_the_editors_mcp_server_runs_only_in_a_trusted_project(tmp_path: Path) -> None:
    """The same server from the editor: held back (with a note) in an untrusted project, a tool in a trusted one."""
    from acp.schema import EnvVariable

    from mcp_helpers import SERVER

    project = tmp_path / "project"
    project.mkdir()
    started, calls = tmp_path / "started", tmp_path / "calls"
    server = McpServerStdio(name="tools", command="sh",
                            args=["-c", f'touch "{started}"; exec "{sys.executable}" "{SERVER}" good'],
                            env=[EnvVariable(name="CALLS_FILE", value=str(calls))])
    replay = write_replay(tmp_path / "r.jsonl", tool_call_text("tools__add", a="2", b="3"), "Five.")

    async def one_prompt(*flags: str) -> tuple[Editor, str]:
        editor, checker = Editor(), SchemaChecker()
        async with await connect(editor, checker, project, replay, tmp_path / "log", "--approval", "full-auto",
                                 *flags) as (conn, _process):
            await initialize(conn)
            session = await conn.new_session(cwd=str(project), mcp_servers=[server])
            response = await conn.prompt(session_id=session.session_id, prompt=[text_block("add 2 and 3")])
        assert checker.problems() == []
        return editor, response.stop_reason

    editor, stop = asyncio.run(one_prompt())
    assert stop == "end_turn" and not started.exists()
    assert "not trusted" in editor.text() and "tools" in editor.text()
    assert editor.of("tool_call") == [] and "tools__add" in editor.text("agent_thought_chunk")  # no such tool

    editor, stop = asyncio.run(one_prompt("--trust-project"))
    assert stop == "end_turn" and started.exists()
    assert calls.read_text().strip() == "add {'a': 2, 'b': 3}"
    call = editor.of("tool_call")[0]
    assert (call.kind, call.title) == ("other", "tools__add")
    assert [u.status for u in editor.of("tool_call_update")] == ["in_progress", "completed"]  # full-auto: not asked

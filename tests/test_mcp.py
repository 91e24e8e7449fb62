"""MCP servers as tools, end to end: real servers written with the official SDK (tests/mcp_test_server.py),
over stdio and streamable HTTP on 127.0.0.1, driven by the loop on replay files."""

from __future__ import annotations

import os
import sys
import time

import pytest

from clovercode.actions.approval import ALWAYS, NO, YES, ModeApprover
from clovercode.agent.budget import StopReason
from clovercode.ground.config import load_config
from clovercode.ground.errors import ConfigError
from conftest import cli_env, default_sigint, make_git_repo, run_cli
from mcp_helpers import (observations, run_session, server_command, start_http_server, wait_for_servers, warnings,
                         write_user_config)
from test_parser_table import xml

FINISH = xml("finish", summary="done")


@pytest.fixture
def project(tmp_path):
    return make_git_repo(tmp_path / "project")


@pytest.fixture
def calls_file(tmp_path, monkeypatch):
    path = tmp_path / "calls.txt"
    path.write_text("")
    monkeypatch.setenv("CALLS_FILE", str(path))  # the stdio server is told through env_vars
    return path


def good_server(timeout: float = 20) -> str:
    return f'[mcp_servers.t]\n{server_command("good")}\nenv_vars = ["CALLS_FILE"]\ntimeout = {timeout}\n'


def test_stdio_tools_are_listed_valid_calls_run_invalid_ones_never_reach_the_server(project, tmp_path, calls_file):
    write_user_config(good_server())
    turns = [xml("t__add", a=2, b=3), xml("t__add", a=1, c=5), xml("t__picture"), FINISH]
    result, sink, _ = run_session(project, tmp_path, turns)
    assert result.stop is StopReason.FINISHED
    tools = sink.of("run_start")[0]["tools"]
    assert {"t__add", "t__repeat", "t__fail", "t__sleep", "t__crash", "t__grow"} <= set(tools)
    assert "view_file" in tools  # joined to the built-in tools, not instead of them
    first, second, third = observations(sink)
    assert first["ok"] and first["text"] == "5"
    assert not second["ok"]
    assert second["text"].startswith("Tool call `t__add` was not run: its arguments do not match the schema.")
    assert "'b' is a required property" in second["text"]
    assert third["ok"] and third["text"].startswith("[image content: image/png")
    assert calls_file.read_text().splitlines() == ["add {'a': 2, 'b': 3}"]  # the invalid call never arrived


def test_the_model_sees_the_servers_descriptions_and_schemas(project, tmp_path):
    write_user_config(good_server())
    seen = []

    class Spy:
        name = "spy"

        def generate(self, messages, tools, params):
            seen.extend(tools)
            from clovercode.backends.base import Finish, TextDelta
            yield TextDelta(FINISH)
            yield Finish("stop")

        def close(self):
            pass

    from clovercode.agent.events import RecordingSink
    from clovercode.wiring.session import open_session

    cfg = load_config(project, os.environ, {})
    session = open_session(project, cfg, interactive=False, backend=Spy())
    try:
        session.run_task("task", RecordingSink())
    finally:
        session.close()
    add = next(s for s in seen if s.name == "t__add")
    assert add.description == "Add two whole numbers and return the sum. (tool `add` of the MCP server 't')"
    assert add.schema["required"] == ["a", "b"] and add.schema["properties"]["a"]["type"] == "integer"


def test_streamable_http_server(project, tmp_path, calls_file):
    proc, url = start_http_server("good", tmp_path, {"CALLS_FILE": str(calls_file)})
    try:
        write_user_config(f'[mcp_servers.web]\nurl = "{url}"\nheaders = {{ Authorization = "Bearer test" }}\n')
        turns = [xml("web__repeat", text="ab", times=3), xml("web__fail", reason="no luck"), FINISH]
        result, sink, _ = run_session(project, tmp_path, turns)
    finally:
        proc.kill()
        proc.wait()
    assert result.stop is StopReason.FINISHED
    ok, failed = observations(sink)
    assert ok["ok"] and ok["text"] == "ababab"
    assert not failed["ok"] and failed["text"].startswith("Error from `fail` on the MCP server 'web':")
    assert calls_file.read_text().splitlines() == ["repeat {'text': 'ab', 'times': 3}", "fail {'reason': 'no luck'}"]


def test_servers_that_fail_to_start_are_warnings_not_errors(project, tmp_path):
    write_user_config(
        f'[mcp_servers.gone]\n{server_command("exit")}\n\n'
        f'[mcp_servers.mute]\n{server_command("silent")}\nstartup_timeout = 1.5\n\n'
        '[mcp_servers.nope]\ncommand = "no-such-mcp-server-program"\n\n'
        f'[mcp_servers.bad]\n{server_command("badschema")}\n\n'
        f'[mcp_servers.off]\n{server_command("good")}\nenabled = false\n')
    started = time.monotonic()
    result, sink, _ = run_session(project, tmp_path, [xml("bad__fine", x=4), xml("gone__anything"), FINISH])
    assert time.monotonic() - started < 30
    said = warnings(sink)
    assert any(w.startswith("MCP server 'gone' is not available: the server closed the connection") and
               w.endswith("its stderr ends with:\ntest server: missing API token, giving up") for w in said)
    assert "MCP server 'mute' is not available: no answer within 1.5 s (startup_timeout)" in said
    assert "MCP server 'nope' is not available: cannot run `no-such-mcp-server-program`: no such program on PATH" in said
    assert any(w.startswith("MCP server 'bad': tool 'broken' is left out: its inputSchema is invalid") for w in said)
    tools = sink.of("run_start")[0]["tools"]
    assert "bad__fine" in tools and "bad__broken" not in tools and not any(t.startswith("off__") for t in tools)
    fine, unknown = observations(sink)
    assert fine["ok"] and fine["text"] == "4"
    assert unknown["text"].startswith("Unknown tool `gone__anything`.")
    assert result.stop is StopReason.FINISHED


def test_a_hanging_call_times_out_and_a_crash_is_an_observation(project, tmp_path):
    write_user_config(good_server(timeout=1.5))
    turns = [xml("t__sleep", seconds=30), xml("t__add", a=1, b=1), xml("t__crash"), xml("t__add", a=1, b=2), FINISH]
    started = time.monotonic()
    result, sink, _ = run_session(project, tmp_path, turns)
    assert time.monotonic() - started < 25  # a 30 s sleep, cut at 1.5 s; closing does not wait for it
    hang, after_hang, crash, after_crash = observations(sink)
    assert hang["text"] == "Error: `sleep` on the MCP server 't' did not answer within 1.5 s; the call was cancelled."
    assert after_hang["ok"] and after_hang["text"] == "2"  # the server survived the cancelled call
    assert crash["text"].startswith("Error: `crash` on the MCP server 't' failed: the server closed the connection")
    assert "test server: crashing on purpose" in crash["text"]  # the server's stderr, quoted
    assert after_crash["text"].startswith("Error: the MCP server 't' is not running, so its tools cannot be used")
    assert result.stop is StopReason.FINISHED


def test_tool_list_changes_are_picked_up(project, tmp_path):
    write_user_config(good_server())
    turns = [xml("t__grow", how="listen"), xml("t__late", word="hello"), FINISH]  # subscriptions/listen only
    result, sink, _ = run_session(project, tmp_path, turns)
    grow, late = observations(sink)
    assert grow["text"] == "grown"
    assert late["ok"] and late["text"] == "HELLO"  # validated and run, though listed only after grow


def test_tool_list_changes_on_a_handshake_era_connection(project, tmp_path, monkeypatch):
    """Older servers announce changes with notifications/tools/list_changed instead of subscriptions."""
    import mcp

    sdk_client = mcp.Client
    versions = []

    def handshake_client(*args, **kwargs):
        client = sdk_client(*args, **{**kwargs, "mode": "legacy"})
        versions.append(client)
        return client

    monkeypatch.setattr(mcp, "Client", handshake_client)
    write_user_config(good_server())
    turns = [xml("t__grow", how="notification"), xml("t__late", word="old"), FINISH]
    result, sink, _ = run_session(project, tmp_path, turns)
    assert versions and versions[0].mode == "legacy"
    assert [o["text"] for o in observations(sink)] == ["grown", "OLD"]


def test_approval_asks_with_server_tool_and_arguments_and_always_covers_that_tool(project, tmp_path, calls_file):
    write_user_config(good_server())
    asked, answers = [], [NO, ALWAYS, YES]

    def ask(request):
        asked.append(request)
        return answers.pop(0)

    approver = ModeApprover("suggest", True, ask)
    turns = [xml("t__add", a=1, b=2), xml("t__add", a=3, b=4), xml("t__add", a=5, b=6), xml("t__repeat", text="x"), FINISH]
    result, sink, _ = run_session(project, tmp_path, turns, approve=approver)
    assert [(r.kind, r.title) for r in asked] == [("mcp", "t: add"), ("mcp", "t: add"), ("mcp", "t: repeat")]
    assert '"a": 1' in asked[0].detail and '"b": 2' in asked[0].detail
    declined, second, third, fourth = observations(sink)
    assert declined["text"] == "Error: The user declined this call of `t__add`."
    assert second["text"] == "7" and third["text"] == "11" and fourth["text"] == "x"  # 'always': add is not asked again
    assert calls_file.read_text().splitlines()[0] == "add {'a': 3, 'b': 4}"


def test_full_auto_and_auto_approve_do_not_ask(project, tmp_path):
    write_user_config(good_server() + 'auto_approve = ["add"]\n')
    asked = []
    approver = ModeApprover("suggest", True, lambda r: asked.append(r) or YES)
    run_session(project, tmp_path, [xml("t__add", a=1, b=2), FINISH], approve=approver)
    assert asked == []


def test_project_servers_need_trust_and_never_carry_secrets(project, tmp_path):
    (project / "clovercode.toml").write_text(f'[mcp_servers.proj]\n{server_command("good")}\n')
    cfg = load_config(project, os.environ)
    assert cfg.declared.mcp_servers == {}
    assert "not trusted" in cfg.declared.notes[0] and str(project) in cfg.declared.notes[0]
    write_user_config(f'trusted_projects = ["{project}"]\n')
    cfg = load_config(project, os.environ)
    assert list(cfg.declared.mcp_servers) == ["proj"] and cfg.declared.notes == []
    (project / "clovercode.toml").write_text(f'[mcp_servers.proj]\n{server_command("good")}\nenv = {{ TOKEN = "x" }}\n')
    with pytest.raises(ConfigError, match="'env' is not allowed in a project file"):
        load_config(project, os.environ)
    write_user_config("")
    (project / "clovercode.toml").write_text(f'trusted_projects = ["{project}"]\n')
    cfg = load_config(project, os.environ)
    assert not cfg.project_trusted and "ignored trusted_projects" in cfg.declared.notes[0]


@pytest.mark.parametrize("table, message", [
    ('[mcp_servers.x]\nargs = ["a"]\n', "needs exactly one of `command` (a stdio server) or `url`"),
    ('[mcp_servers.x]\ncommand = "a"\nurl = "http://h"\n', "needs exactly one of"),
    ('[mcp_servers.x]\nurl = "ftp://h"\n', "url must start with http:// or https://"),
    ('[mcp_servers.x]\ncommand = "a"\ntimeout = 0\n', "timeout must be a positive number of seconds"),
    ('[mcp_servers.x]\ncommand = "a"\ncomand = "b"\n', "unknown key 'comand'"),
    ('[mcp_servers.a__b]\ncommand = "a"\n', "server names use letters"),
])
def test_bad_server_tables_are_clear_config_errors(project, table, message):
    write_user_config(table)
    with pytest.raises(ConfigError, match=None) as info:
        load_config(project, os.environ)
    assert message in str(info.value)


def test_mcp_list_and_check_commands(project, tmp_path):
    write_user_config(good_server() + f'\n[mcp_servers.gone]\n{server_command("exit")}\n')
    env = cli_env(COLUMNS="200")
    listed = run_cli("mcp", "list", "-C", str(project), env=env)
    assert listed.returncode == 0, listed.stderr
    assert "t  running · 7 tools  stdio:" in listed.stdout and "t__add  Add two whole numbers" in listed.stdout
    assert "gone  failed" in listed.stdout
    checked = run_cli("mcp", "check", "t", "-C", str(project), env=env)
    assert checked.returncode == 0 and "ok: t works" in checked.stdout
    assert '{"a": integer (required), "b": integer (required)}' in checked.stdout
    failed = run_cli("mcp", "check", "gone", "-C", str(project), env=env)
    assert failed.returncode == 1 and "missing API token" in failed.stdout and "Traceback" not in failed.stdout + failed.stderr
    unknown = run_cli("mcp", "check", "nosuch", "-C", str(project), env=env)
    assert unknown.returncode == 2 and "no MCP server named 'nosuch' is configured (configured: gone, t)" in unknown.stderr
    tools = run_cli("tools", cwd=project, env=env)
    assert tools.returncode == 0 and "t__repeat  Repeat a text n times." in tools.stdout and "view_file" in tools.stdout
    shown = run_cli("tools", "show", "t__add", cwd=project, env=env)
    assert shown.returncode == 0 and '"required": [' in shown.stdout and '"a"' in shown.stdout


def test_repl_asks_before_an_mcp_call_in_a_real_terminal(project, tmp_path, calls_file):
    import pexpect

    from mcp_helpers import replay

    write_user_config(good_server() + f'\n[mcp_servers.gone]\n{server_command("exit")}\n')
    model = replay(tmp_path, [xml("t__add", a=20, b=22), "The sum is 42.", xml("t__add", a=1, b=1), "Declined."])
    env = cli_env(PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm", COLUMNS="120", LINES="40")
    child = pexpect.spawn(sys.executable, ["-m", "clovercode", "--model", f"replay:{model}", "--approval", "suggest"],
                          cwd=str(project), env=env, encoding="utf-8", timeout=60, dimensions=(40, 120))
    try:
        child.expect_exact("clover>")  # at once: the servers start in the background
        wait_for_servers(child, t="running", gone="failed")
        child.sendline("add 20 and 22")
        child.expect_exact("MCP server 'gone' is not available: the server closed the connection")  # said in the next turn
        child.expect_exact("clovercode wants to call the MCP tool")
        child.expect_exact("add")
        child.expect_exact("of the server")
        child.expect_exact("(outside the sandbox)")
        child.expect_exact('"a": 20')
        child.expect_exact("Call it? [y]es / [n]o / [a]lways for this tool this session · Esc cancels the run:")
        child.sendline("y")
        child.expect_exact("The sum is 42.")
        child.expect_exact("clover>")
        child.sendline("add 1 and 1")
        child.expect_exact("Call it?")
        child.sendline("n")
        child.expect_exact("Tell the model why")
        child.sendline("")  # no reason: a plain no
        child.expect_exact("You declined this call of `t__add`.")  # the model reads "The user declined"
        child.expect_exact("clover>")
        child.sendline("/tools")
        child.expect_exact("t__repeat")
        child.expect_exact("clover>")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert calls_file.read_text().splitlines() == ["add {'a': 20, 'b': 22}"]


def test_ctrl_c_during_a_slow_mcp_call_interrupts_the_step_not_the_session(project, tmp_path):
    import pexpect

    from mcp_helpers import replay

    write_user_config(good_server(timeout=120))
    model = replay(tmp_path, [xml("t__sleep", seconds=100), xml("t__add", a=2, b=2), "Four."])
    env = cli_env(PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm", COLUMNS="120", LINES="40")
    child = pexpect.spawn(sys.executable, ["-m", "clovercode", "--model", f"replay:{model}", "--approval", "full-auto"],
                          cwd=str(project), env=env, encoding="utf-8", timeout=30, dimensions=(40, 120),
                          preexec_fn=default_sigint)
    try:
        child.expect_exact("clover>")
        wait_for_servers(child, t="running")
        child.sendline("sleep a while")
        child.expect_exact("→ t__sleep")
        time.sleep(0.5)
        child.sendintr()
        child.expect_exact("interrupted")
        child.expect_exact("clover>")
        child.sendline("what is 2 + 2?")
        child.expect_exact("Four.")  # the server survived the Ctrl-C (it runs in its own session)
        child.expect_exact("clover>")
        started = time.monotonic()
        child.sendeof()
        child.expect(pexpect.EOF)
        assert time.monotonic() - started < 15  # closing does not wait for the abandoned call
    finally:
        child.close(force=True)
    assert child.exitstatus == 0

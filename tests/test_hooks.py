"""Hooks end to end: the user's commands around tool calls and the stop decision, in a real session
on replay files (the same path fix, exec and the REPL take)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time

import pytest

from clovercode.agent.budget import StopReason
from clovercode.ground.config import load_config
from clovercode.ground.errors import ConfigError
from conftest import make_git_repo
from mcp_helpers import observations, run_session, warnings, write_user_config
from test_parser_table import xml

FINISH = xml("finish", summary="done")


@pytest.fixture
def project(tmp_path):
    repo = make_git_repo(tmp_path / "project")
    return repo


def script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return f"{sys.executable} {path}"


def hook(event: str, command: str, matcher: str = "", timeout: float = 20) -> str:
    lines = [f"[[hooks.{event}]]", f"command = {json.dumps(command)}", f"timeout = {timeout}"]
    if matcher:
        lines.append(f"matcher = {json.dumps(matcher)}")
    return "\n".join(lines) + "\n\n"


def test_a_pre_hook_blocks_with_a_reason_the_model_receives(project, tmp_path):
    guard = script(tmp_path, "guard.py", """
        import json, sys
        event = json.load(sys.stdin)
        if "rm " in event["tool_input"]["command"]:
            print("no deleting files in this project", file=sys.stderr)
            sys.exit(2)
    """)
    write_user_config(hook("pre_tool_use", guard, matcher="run_command"))
    (project / "keep.txt").write_text("precious\n")
    turns = [xml("run_command", command="rm keep.txt"), xml("view_file", path="keep.txt"), FINISH]
    result, sink, _ = run_session(project, tmp_path, turns, sandbox="none")
    blocked, viewed = observations(sink)
    assert not blocked["ok"]
    assert blocked["text"] == ("Not run: a pre_tool_use hook blocked this call of `run_command`:\n"
                               "no deleting files in this project")
    assert (project / "keep.txt").read_text() == "precious\n"
    assert viewed["ok"]  # the matcher is for run_command only: view_file was not blocked
    assert [e["blocked"] for e in sink.of("hook")] == [True]
    assert result.stop is StopReason.FINISHED


def test_a_formatting_post_hook_changes_the_file_and_the_next_view_sees_it(project, tmp_path):
    formatter = script(tmp_path, "fmt.py", """
        import json, pathlib, sys
        event = json.load(sys.stdin)
        path = pathlib.Path(event["cwd"]) / event["tool_input"]["path"]
        path.write_text(path.read_text().replace("x=1", "x = 1"))
        print("style: spaces around '=' added", file=sys.stderr)
        sys.exit(2)  # exit 2 after a tool: the message goes back to the model
    """)
    write_user_config(hook("post_tool_use", formatter, matcher="write_file|edit_file"))
    turns = [xml("write_file", path="a.py", content="x=1\n"), xml("view_file", path="a.py"), FINISH]
    result, sink, _ = run_session(project, tmp_path, turns)
    written, viewed = observations(sink)
    assert written["ok"]
    assert "[post_tool_use hook" in written["text"] and "style: spaces around '=' added" in written["text"]
    assert "a post_tool_use hook changed a.py after this call; view it before editing it again." in written["text"]
    assert "x = 1" in viewed["text"] and "x=1" not in viewed["text"]
    assert (project / "a.py").read_text() == "x = 1\n"
    assert len(sink.of("hook")) == 1  # view_file did not match


def test_a_stop_hook_sends_the_model_back_to_work(project, tmp_path):
    checker = script(tmp_path, "check.py", """
        import json, pathlib, sys
        event = json.load(sys.stdin)
        with open(pathlib.Path(event["cwd"]).parent / "stop-events.jsonl", "a") as f:
            f.write(json.dumps(event) + "\\n")
        if not (pathlib.Path(event["cwd"]) / "CHANGELOG.md").exists():
            print("CHANGELOG.md is missing: add an entry", file=sys.stderr)
            sys.exit(2)
    """)
    write_user_config(hook("stop", checker))
    turns = [FINISH, xml("write_file", path="CHANGELOG.md", content="- fixed\n"), FINISH]
    result, sink, _ = run_session(project, tmp_path, turns)
    assert result.stop is StopReason.FINISHED and result.steps == 3
    refused = observations(sink)[0]
    assert refused["name"] == "finish" and not refused["ok"]
    assert "CHANGELOG.md is missing: add an entry" in refused["text"]
    events = [json.loads(line) for line in (project.parent / "stop-events.jsonl").read_text().splitlines()]
    assert [(e["hook_event_name"], e["stop_reason"], e["stop_hook_active"]) for e in events] == [
        ("stop", "finished", False), ("stop", "finished", True)]
    assert events[1]["changed_files"] == ["CHANGELOG.md"]


def test_stop_hooks_are_bounded(project, tmp_path):
    write_user_config("[hooks]\nmax_stop_blocks = 2\n\n" + hook("stop", "echo never >&2; exit 2"))
    result, sink, _ = run_session(project, tmp_path, [FINISH, FINISH, FINISH])
    assert result.stop is StopReason.FINISHED and result.steps == 3
    assert any("already sent the model back 2 times (hooks.max_stop_blocks); stopping anyway" in w
               for w in warnings(sink))


def test_a_stop_hook_in_the_repl_objects_to_a_plain_answer(project, tmp_path):
    write_user_config(hook("stop", "test -f done.txt || { echo 'write done.txt first' >&2; exit 2; }"))
    turns = ["All done.", xml("write_file", path="done.txt", content="ok\n"), "Now it is done."]
    result, sink, session = run_session(project, tmp_path, turns, interactive=True)
    assert result.stop is StopReason.ANSWERED and result.summary == "Now it is done."
    feedback = [m for m in session.conversation.messages if m.role == "user" and "write done.txt first" in m.content]
    assert len(feedback) == 1


def test_a_hook_that_hangs_is_stopped_and_reported_and_the_call_goes_on(project, tmp_path):
    write_user_config(hook("pre_tool_use", "sleep 60", timeout=1) + hook("post_tool_use", "exit 7"))
    started = time.monotonic()
    result, sink, _ = run_session(project, tmp_path, [xml("list_files"), FINISH])
    assert time.monotonic() - started < 20
    listed = observations(sink)[0]
    assert listed["ok"]
    said = warnings(sink)
    assert "pre_tool_use hook `sleep 60` timed out after 1 s and was stopped; carrying on without it" in said
    assert "post_tool_use hook `exit 7` failed with exit code 7; carrying on" in said
    assert result.stop is StopReason.FINISHED


def test_project_hooks_need_trust(project, tmp_path):
    (project / "clovercode.toml").write_text(hook("pre_tool_use", "exit 2"))
    cfg = load_config(project, os.environ)
    assert cfg.declared.hooks == [] and "declares hooks; they are ignored" in cfg.declared.notes[0]
    result, sink, _ = run_session(project, tmp_path, [xml("list_files"), FINISH])
    assert observations(sink)[0]["ok"]
    assert any("declares hooks; they are ignored because this project is not trusted" in w for w in warnings(sink))
    write_user_config(f'trusted_projects = ["{project}"]\n')
    assert [h.command for h in load_config(project, os.environ).declared.hooks] == ["exit 2"]


def test_a_star_matcher_runs_the_hook_for_every_tool(project, tmp_path):
    """`*` is documented (and in Claude Code) as every tool; as a regex it would be refused."""
    write_user_config(hook("pre_tool_use", "cat > /dev/null", matcher="*") + hook("stop", "true", matcher="*"))
    assert [h.matcher for h in load_config(project, os.environ).declared.hooks] == ["*", "*"]
    result, sink, _ = run_session(project, tmp_path, [xml("list_files"), xml("write_file", path="a.txt", content="x\n"), FINISH])
    assert result.stop is StopReason.FINISHED
    assert [e["event"] for e in sink.of("hook")] == ["pre_tool_use", "pre_tool_use", "stop"]  # finish is no tool call


@pytest.mark.parametrize("matcher, tool, expected", [
    ("", "run_command", True), ("*", "docs__search", True), (" * ", "view_file", True),
    ("run_command", "run_command", True), ("run_command", "run_commands", False),  # the whole name
    ("edit_file|write_file", "write_file", True), ("edit_file|write_file", "view_file", False),
    ("docs__.*", "docs__search", True), ("docs__.*", "git__log", False),
    ("ev.get+sum", "ev.get+sum", True),  # an exact name that is no regex for itself
])
def test_matchers_keep_their_documented_meaning(matcher, tool, expected):
    from clovercode.hooks.config import parse_hooks

    [parsed] = parse_hooks("pre_tool_use", [{"command": "true", "matcher": matcher}], "config.toml")
    assert parsed.matches(tool) is expected


def test_an_invalid_matcher_names_the_hook_and_suggests_a_pattern():
    from clovercode.hooks.config import parse_hooks

    with pytest.raises(ConfigError) as info:
        parse_hooks("post_tool_use", [{"command": "true"}, {"command": "ruff format \x1b[2J", "matcher": "*_file"}],
                    "config.toml")
    text = str(info.value)
    assert text.startswith("config.toml: hooks.post_tool_use[1].matcher '*_file' of the hook `ruff format")
    assert "ruff format \\x1b[2J" in text and "\x1b" not in text  # the command is inert
    assert "did you mean '.*_file'?" in text
    assert "`*` or no matcher means every tool" in (info.value.hint or "")


@pytest.mark.parametrize("text, message", [
    ('[[hooks.before_tool]]\ncommand = "x"\n', "unknown hook event 'hooks.before_tool'"),
    ('[[hooks.pre_tool_use]]\nmatcher = "("\ncommand = "x"\n', "matcher '(' of the hook `x` is not a valid regular expression"),
    ('[[hooks.pre_tool_use]]\ncommand = ""\n', "command must be a non-empty string"),
    ('[[hooks.stop]]\ncommand = "x"\ntimeout = -1\n', "timeout must be a positive number of seconds"),
    ('[hooks]\npre_tool_use = "x"\n', "must be a list of tables"),
])
def test_bad_hook_tables_are_clear_config_errors(project, text, message):
    write_user_config(text)
    with pytest.raises(ConfigError) as info:
        load_config(project, os.environ)
    assert message in str(info.value)


def test_an_invalid_matcher_stops_the_cli_with_exit_2_and_no_traceback(project, tmp_path):
    from conftest import run_cli

    write_user_config(hook("pre_tool_use", "./lint.sh", matcher="*.py"))
    proc = run_cli("exec", "--model", f"replay:{tmp_path / 'unused.jsonl'}", "a task", cwd=project)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "hooks.pre_tool_use[0].matcher '*.py' of the hook `./lint.sh` is not a valid regular expression" in proc.stderr
    assert "did you mean '.*.py'?" in proc.stderr

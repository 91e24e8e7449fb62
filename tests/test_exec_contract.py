"""`exec --json` keeps its contract on every exit path: each line valid against the schema,
run_started first, run_completed last with the process's exit code, an error event right before a
non-zero one, every observation after its tool_call (test_exec.events_of checks all of it)."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import EXAMPLES, cli_env, run_cli
from test_exec import events_of, replay
from test_parser_table import xml

from clovercode.front.execcmd import refused_what
from clovercode.actions.context import ApprovalRequest
from clovercode.ui.jsonevents import JsonEventWriter, exec_failure
from clovercode.ui.render import format_args


@pytest.fixture
def plain_dir(tmp_path) -> Path:
    import shutil

    return Path(shutil.copytree(EXAMPLES / "calc", tmp_path / "calc"))


@pytest.mark.parametrize("args, stdin, message", [
    (("--max-steps", "many", "look"), None, "--max-steps"),  # typer refuses the flag value
    (("--no-such-flag", "look"), None, "--no-such-flag"),  # an unknown flag
    ((), "  \n", "the task is empty"),  # clovercode refuses the task
])
def test_usage_errors_end_the_stream_by_its_contract(plain_dir, tmp_path, args, stdin, message):
    proc = run_cli("exec", "--json", "--model", replay(tmp_path, "x"), *args, cwd=plain_dir, input=stdin)
    assert proc.returncode == 2
    started, error, done = events_of(proc.stdout, 2)
    assert started["model"] is None and started["tools"] == [] and started["session_id"] is None
    assert message in error["message"] and done["stop_reason"] == "error" and done["steps"] == 0
    assert "Traceback" not in proc.stderr


def test_a_config_error_ends_the_stream_by_its_contract(plain_dir, tmp_path):
    proc = run_cli("exec", "--json", "--model", replay(tmp_path, "x"), "look", cwd=plain_dir,
                   env=cli_env(CLOVERCODE_MAX_STEPS="many"))
    assert proc.returncode == 2
    _, error, done = events_of(proc.stdout, 2)
    assert "CLOVERCODE_MAX_STEPS" in error["message"] and done["detail"] == error["message"]


def test_a_sandbox_that_cannot_start_ends_the_stream_by_its_contract(plain_dir, tmp_path):
    proc = run_cli("exec", "--json", "--model", replay(tmp_path, "x"), "look", cwd=plain_dir,
                   env=cli_env(PATH=str(tmp_path / "no-bin")))  # no bwrap to be found
    assert proc.returncode == 6
    started, error, done = events_of(proc.stdout, 6)
    assert started["task"] == "look" and started["sandbox"] == "workspace-write"
    assert "bubblewrap (bwrap) is not installed" in error["message"] and done["stop_reason"] == "error"


def test_deltas_need_json(plain_dir, tmp_path):
    proc = run_cli("exec", "--include-deltas", "--model", replay(tmp_path, "x"), "look", cwd=plain_dir)
    assert proc.returncode == 2 and "--include-deltas needs --json" in proc.stderr and proc.stdout == ""


def test_a_model_error_counts_only_the_steps_taken(plain_dir, tmp_path):
    proc = run_cli("exec", "--json", "--model", replay(tmp_path, xml("view_file", path="calc.py")), "look",
                   cwd=plain_dir)
    assert proc.returncode == 5
    events = events_of(proc.stdout, 5)
    done = events[-1]
    assert done["stop_reason"] == "model_error" and done["steps"] == 1  # the second turn never happened
    assert "no more turns" in events[-2]["message"]
    assert [e["step"] for e in events if e["type"] == "model_text"] == [1]


def test_a_budget_that_runs_out_is_an_error_too(plain_dir, tmp_path):
    proc = run_cli("exec", "--json", "--max-steps", "2", "--model",
                   replay(tmp_path, xml("view_file", path="calc.py"), xml("list_files", path=".")), "look", cwd=plain_dir)
    assert proc.returncode == 3
    events = events_of(proc.stdout, 3)
    assert events[-1]["stop_reason"] == "max_steps" and events[-1]["steps"] == 2
    assert events[-2]["message"] == events[-1]["detail"] == "reached the step limit (2 steps)"


def test_start_up_warnings_come_after_run_started(plain_dir, tmp_path):
    """The untrusted project's note and --sandbox none are warning events, never lines before run_started."""
    (plain_dir / "clovercode.toml").write_text('approval = "full-auto"\n')
    proc = run_cli("exec", "--json", "--sandbox", "none", "--model", replay(tmp_path, "Fine."), "hi", cwd=plain_dir)
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout, 0)
    categories = {e["category"] for e in events if e["type"] == "warning"}
    assert {"startup", "sandbox"} <= categories
    [note] = [e for e in events if e["type"] == "warning" and e["category"] == "startup"]
    assert "approval" in note["text"]


def test_a_failing_hook_is_a_hook_warning_not_a_loop_one(plain_dir, tmp_path):
    import os

    config = Path(os.environ["XDG_CONFIG_HOME"]) / "clovercode" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[[hooks.post_tool_use]]\ncommand = "exit 7"\nmatcher = "view_file"\n')
    proc = run_cli("exec", "--json", "--model", replay(tmp_path, xml("view_file", path="calc.py"), "Done."), "look",
                   cwd=plain_dir)
    assert proc.returncode == 0, proc.stderr
    warnings = [e for e in events_of(proc.stdout, 0) if e["type"] == "warning"]
    assert warnings and all(w["category"] == "hook" for w in warnings)


@pytest.mark.parametrize("signum, code, detail", [(signal.SIGINT, 130, "interrupted by the user (Ctrl-C)"),
                                                  (signal.SIGTERM, 143, "terminated by SIGTERM")], ids=["sigint", "sigterm"])
def test_an_interrupted_command_reports_the_time_it_ran(plain_dir, tmp_path, signum, code, detail):
    from conftest import default_sigint

    model = replay(tmp_path, xml("run_command", command="sleep 60"), "never")
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "exec", "--json", "--model", model,
                             "wait"], cwd=plain_dir, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=default_sigint)
    lines = []
    while not lines or '"tool_call"' not in lines[-1]:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        lines.append(line)
    time.sleep(1.0)  # the command runs now
    proc.send_signal(signum)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == code
    events = events_of("".join(lines) + rest, code)
    [observation] = [e for e in events if e["type"] == "observation"]
    assert not observation["ok"] and observation["seconds"] >= 0.9  # it ran about a second, not 0.0
    assert events[-1]["stop_reason"] == "interrupted" and events[-1]["detail"] == detail


def test_deltas_stream_the_text_and_model_text_still_ends_the_turn(plain_dir, tmp_path):
    answer = "calc.py computes the mean of a list of numbers, and a few more things besides."
    model = replay(tmp_path, "<think>Let me look first.</think>I will read it.\n" + xml("view_file", path="calc.py"), answer)
    proc = run_cli("exec", "--json", "--include-deltas", "--model", model, "what is calc.py?", cwd=plain_dir)
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout, 0)
    deltas = [e for e in events if e["type"] == "model_text_delta"]
    assert all("<tool_call" not in d["text"] and "<function" not in d["text"] for d in deltas)
    first = [d for d in deltas if d["step"] == 1]
    assert "".join(d["text"] for d in first if d["reasoning"]).strip() == "Let me look first."
    assert "".join(d["text"] for d in first if not d["reasoning"]).strip() == "I will read it."
    second = [d for d in deltas if d["step"] == 2]
    assert len(second) > 1 and "".join(d["text"] for d in second) == answer  # in pieces, as it was written
    kinds = [(e["type"], e.get("step")) for e in events]
    for step in (1, 2):  # each turn's deltas come before its model_text
        last_delta = max(i for i, k in enumerate(kinds) if k == ("model_text_delta", step))
        assert last_delta < kinds.index(("model_text", step))
    plain = run_cli("exec", "--json", "--model", replay(tmp_path, answer), "again", cwd=plain_dir)
    assert not [e for e in events_of(plain.stdout, 0) if e["type"] == "model_text_delta"]


def test_a_bug_mid_run_still_ends_the_stream():
    """What CloverGroup does for exit 70 (and jsonexit for a signal outside the loop): the open stream ends."""
    out = io.StringIO()
    writer = JsonEventWriter(out, start={"task": "t", "model": "m", "sandbox": "none", "max_steps": 3})
    writer.emit("warning", text="said before the run", category="startup")
    writer.emit("run_start", task="t", model="m", executor="none", tools=["view_file"], limits={"max_steps": 3})
    writer.emit("step_start", step=1)
    exec_failure(out, "internal error: clovercode hit a bug (crash.txt)", 70)
    exec_failure(out, "said twice", 130, interrupted=True)  # a second exit adds nothing to an ended stream
    events = events_of(out.getvalue(), 70)
    assert [e["type"] for e in events] == ["run_started", "warning", "error", "run_completed"]
    assert events[-1]["stop_reason"] == "error" and events[-1]["steps"] == 1
    fresh = io.StringIO()  # another stream: the ended one above is not reused
    exec_failure(fresh, "terminated by SIGTERM", 143, interrupted=True)  # before any writer existed
    assert events_of(fresh.getvalue(), 143)[-1]["stop_reason"] == "interrupted"


def test_an_mcp_refusal_names_the_tool_not_a_command():
    assert refused_what(ApprovalRequest("mcp", "evhttp: get-sum", "{}")) == "the MCP tool `evhttp: get-sum`"
    assert refused_what(ApprovalRequest("command", "ls -l")) == "the command `ls -l`"
    assert refused_what(ApprovalRequest("edit", "edit a.py")) == "the edit `edit a.py`"


def test_the_call_line_shows_numbers_as_numbers():
    assert format_args({"a": 2, "b": "2", "c": True, "d": 1.5, "e": [1, "x"]}) == 'a=2 b=\'2\' c=true d=1.5 e=[1, "x"]'


@pytest.mark.parametrize("delay", [0.0, 0.4])
def test_sigterm_while_exec_starts_still_ends_the_stream(plain_dir, tmp_path, delay):
    """From clovercode's first line on (loading the CLI, parsing flags, opening the session)."""
    from test_fix_overclaim import catches

    model = replay(tmp_path, xml("run_command", command="sleep 60"), "never")
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "exec", "--json", "--model", model, "wait"],
                            cwd=plain_dir, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not catches(proc.pid, signal.SIGTERM) and proc.poll() is None:
        time.sleep(0.002)
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    events = events_of(out, 143)
    assert events[-1]["stop_reason"] == "interrupted" and "SIGTERM" in events[-2]["message"]


def test_a_long_turn_says_it_is_working_and_nothing_comes_after_the_end() -> None:
    # --json without deltas was silent between "model loaded" and the answer (issue 49): a model_working
    # line whenever the model writes for working_every seconds without another line
    import jsonschema

    from clovercode.ui.jsonevents import schema_path

    out = io.StringIO()
    writer = JsonEventWriter(out, start={"task": "t", "model": "m", "sandbox": "none", "tools": [], "max_steps": 3})
    writer.working_every = 0.05
    writer.begin()
    writer.emit("step_start", step=1)
    writer.emit("text_delta", text="abc")
    time.sleep(0.3)
    writer.emit("model_turn", step=1, content="abc", reasoning="", usage={}, seconds=0.3)
    time.sleep(0.15)  # no turn is running: nothing more
    writer.emit("run_end", stop_reason="finished", steps=1, detail="done", summary="abc", usage={}, seconds=0.5,
                changed_files=[])
    time.sleep(0.1)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    kinds = [e["type"] for e in events]
    working = [e for e in events if e["type"] == "model_working"]
    assert 2 <= len(working) and all(e["step"] == 1 and e["chars"] == 3 for e in working), kinds
    assert kinds.index("model_text") > max(i for i, k in enumerate(kinds) if k == "model_working")
    assert kinds[-1] == "run_completed"
    validator = jsonschema.Draft202012Validator(json.loads(schema_path().read_text()))
    for event in events:
        validator.validate(event)

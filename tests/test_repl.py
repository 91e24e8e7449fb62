"""The REPL under a real pseudo-terminal (pexpect): prompt, slash commands, a task, Ctrl-C, Ctrl-D."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pexpect
import pytest

from conftest import EXAMPLES, cli_env, default_sigint
from test_parser_table import xml

PROMPT = "clover>"


def spawn(repo: Path, model: str, **env: str) -> pexpect.spawn:
    environment = cli_env(PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm", COLUMNS="120", LINES="40", **env)
    # full-auto asks nothing only inside the sandbox, so these run in the default (bubblewrap) one.
    child = pexpect.spawn(sys.executable, ["-m", "clovercode", "--model", model, "--approval", "full-auto"],
                          cwd=str(repo), env=environment, encoding="utf-8", timeout=30, dimensions=(40, 120),
                          preexec_fn=default_sigint)
    child.expect_exact(PROMPT)
    return child


def test_slash_commands_task_and_ctrl_d(calc_repo):
    child = spawn(calc_repo, f"replay:{EXAMPLES / 'calc.replay.jsonl'}")
    child.sendline("/help")
    child.expect_exact("/clear")
    child.expect_exact(PROMPT)
    child.sendline("/tools")
    child.expect_exact("run_command")
    child.expect_exact(PROMPT)
    child.sendline("/model")
    child.expect_exact("model: replay:")
    child.expect_exact(PROMPT)
    child.sendline("/bogus")
    child.expect_exact("unknown command /bogus")
    child.expect_exact(PROMPT)
    child.sendline("mean([1, 2, 3, 4]) should be 2.5")
    child.expect_exact("step 1/30")
    child.expect_exact("→ view_file")
    child.expect_exact("→ edit_file")
    child.expect_exact("stopped: the model called finish")
    child.expect_exact(PROMPT)
    assert "sum(values) / len(values)" in (calc_repo / "calc.py").read_text()
    child.sendeof()  # Ctrl-D
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    history = Path(os.environ["XDG_STATE_HOME"]) / "clovercode" / "history"
    assert "mean([1, 2, 3, 4]) should be 2.5" in history.read_text()


def test_a_trajectory_replays_all_its_turns_in_the_repl(calc_repo, tmp_path):
    """Observation lines of a recorded trajectory are not turns: the REPL plays every recorded call."""
    from conftest import make_git_repo, run_cli

    recorded_in = make_git_repo(tmp_path / "recorded", EXAMPLES / "calc")
    proc = run_cli("fix", "mean is wrong", "--repo", str(recorded_in), "--model", f"replay:{EXAMPLES / 'calc.replay.jsonl'}",
                   "--sandbox", "none", "--json")
    trajectory = json.loads(proc.stdout)["trajectory"]
    child = spawn(calc_repo, f"replay:{trajectory}")
    child.sendline("mean([1, 2, 3, 4]) should be 2.5")
    child.expect_exact("→ view_file")
    child.expect_exact("→ edit_file")
    child.expect_exact("→ run_command")
    child.expect_exact("stopped: the model called finish")
    child.expect_exact(PROMPT)
    assert "sum(values) / len(values)" in (calc_repo / "calc.py").read_text()
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()


def test_ctrl_c_interrupts_the_step_not_the_session(calc_repo, tmp_path):
    replay = tmp_path / "r.jsonl"
    turns = [xml("run_command", command="sleep 60"), "The answer is 42."]
    replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    child = spawn(calc_repo, f"replay:{replay}")
    child.sendline("run something slow")
    child.expect_exact("→ run_command")
    child.sendintr()  # Ctrl-C while the command runs
    child.expect_exact("interrupted")
    child.expect_exact(PROMPT)
    child.sendline("what is the answer?")
    child.expect_exact("The answer is 42.")
    child.expect_exact(PROMPT)
    child.sendintr()  # Ctrl-C at the prompt only clears the line
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_multiline_input_with_escape_enter(calc_repo, tmp_path):
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": "Noted."}) + "\n")
    child = spawn(calc_repo, f"replay:{replay}")
    child.send("first line")
    child.send("\x1b\r")  # Esc Enter inserts a newline
    child.send("second line\r")
    child.expect_exact("Noted.")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    trajectories = list((Path(os.environ["XDG_STATE_HOME"]) / "clovercode" / "trajectories").glob("*.jsonl"))
    start = json.loads(trajectories[0].read_text().splitlines()[0])
    assert start["kind"] == "run_start" and start["task"] == "first line\nsecond line"


@pytest.mark.parametrize("no_color", [True, False])
def test_no_color_is_honoured(calc_repo, tmp_path, no_color):
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": xml("view_file", path="calc.py")}) + "\n" + json.dumps({"text": "done"}) + "\n")
    env = {"NO_COLOR": "1"} if no_color else {}
    child = spawn(calc_repo, f"replay:{replay}", **env)
    child.sendline("look")
    child.expect_exact("done")
    output = child.before
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    colour_codes = ("\x1b[31m", "\x1b[32m", "\x1b[36m", "\x1b[1;36m", "\x1b[33m")
    assert any(code in output for code in colour_codes) is not no_color


def test_piped_stdin_without_a_terminal(calc_repo, tmp_path):
    from conftest import run_cli

    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": "Plain answer."}) + "\n")
    proc = run_cli("--model", f"replay:{replay}", "--sandbox", "none", cwd=calc_repo, input="a question\n/exit\n")
    assert proc.returncode == 0, proc.stderr
    assert "Plain answer." in proc.stdout and "\x1b[" not in proc.stdout


def test_brackets_in_slash_command_input_are_text_not_markup(calc_repo, tmp_path):
    from conftest import run_cli

    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": "Plain answer."}) + "\n")
    # rich reads "[/]" as a closing tag: unescaped, these lines crashed the REPL with exit 70
    lines = f"/model replay:{tmp_path}/[/]missing.jsonl\n/nope[/]\n/model\n/exit\n"
    proc = run_cli("--model", f"replay:{replay}", "--sandbox", "none", cwd=calc_repo, input=lines,
                   env=cli_env(COLUMNS="400"))
    assert proc.returncode == 0, proc.stderr
    assert f"error: replay file not found: {tmp_path}/[/]missing.jsonl" in proc.stdout
    assert "unknown command /nope[/]" in proc.stdout
    assert f"model: replay:{replay}" in proc.stdout


def test_unwritable_history_file_is_a_clear_error(calc_repo, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": "Noted."}) + "\n")
    env = cli_env(PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm", CLOVERCODE_HISTORY_FILE=str(blocker / "history"))
    child = pexpect.spawn(sys.executable, ["-m", "clovercode", "--model", f"replay:{replay}", "--sandbox", "none"],
                          cwd=str(calc_repo), env=env, encoding="utf-8", timeout=30, dimensions=(40, 200))
    child.expect_exact(f"cannot write the REPL history {blocker / 'history'}")  # it was exit 70, a crash file
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2

"""Start and resume like the peers: `clovercode "task"` opens the REPL with that first message,
`-c`/`--continue` resumes this project's last session, `exec --resume ID|--last` continues one
headless. The argument lifting is pure; the REPL runs are piped (in-process where they can be)."""

from __future__ import annotations

import json

import typer

from clovercode.front.cli import app
from clovercode.front.startargs import lift_task
from conftest import write_replay

GROUP = typer.main.get_command(app)


def test_a_first_word_that_is_no_command_is_the_task_and_options_keep_their_meaning():
    assert lift_task(GROUP, ["explain calc.py"]) == ["--task=explain calc.py"]
    assert lift_task(GROUP, ["--model", "replay:x", "fix it", "--approval", "plan"]) == [
        "--task=fix it", "--model", "replay:x", "--approval", "plan"]
    assert lift_task(GROUP, ["-m", "exec", "exec"]) == ["-m", "exec", "exec"]  # -m takes a value; then a command
    assert lift_task(GROUP, ["exec", "--json", "hi"]) == ["exec", "--json", "hi"]
    assert lift_task(GROUP, ["--continue", "-c"]) == ["--continue", "-c"]
    assert lift_task(GROUP, ["--", "--help"]) == ["--task=--help"]


def cli(*args: str, cwd, input: str = ""):
    """The CLI in-process (typer's runner): the REPL reads piped lines."""
    import os

    from typer.testing import CliRunner

    here = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(app, list(args), input=input)
    finally:
        os.chdir(here)


def test_clovercode_task_sends_it_first_and_continue_resumes_the_last_session(calc_repo, tmp_path):
    model = write_replay(tmp_path / "r.jsonl", "The mean is in calc.py.")
    first = cli("--model", f"replay:{model}", "explain calc.py", cwd=calc_repo, input="/exit\n")
    assert first.exit_code == 0, first.output
    assert "clover> explain calc.py" in first.output and "The mean is in calc.py." in first.output
    second = write_replay(tmp_path / "r2.jsonl", "You asked about calc.py.")
    again = cli("-c", "--model", f"replay:{second}", cwd=calc_repo, input="what did I ask?\n")
    assert again.exit_code == 0, again.output
    assert "resumed" in again.output and "last task: explain calc.py" in again.output
    assert "You asked about calc.py." in again.output
    both = cli("--continue", "--resume", "x", cwd=calc_repo)
    assert both.exit_code == 2 and "--continue and --resume both pick a session" in both.output


def test_exec_resume_last_continues_the_session_headless(calc_repo, tmp_path):
    model = write_replay(tmp_path / "r.jsonl", "First answer.")
    one = cli("exec", "--model", f"replay:{model}", "remember 42", cwd=calc_repo)
    assert one.exit_code == 0, one.output
    model = write_replay(tmp_path / "r2.jsonl", "Second answer, knowing the first.")
    two = cli("exec", "--json", "--last", "--model", f"replay:{model}", "what number?", cwd=calc_repo)
    assert two.exit_code == 0, two.output
    events = [json.loads(line) for line in two.stdout.splitlines() if line.startswith("{")]
    assert events[-1]["answer"] == "Second answer, knowing the first."
    assert "last task: remember 42" in two.output
    # the run goes on under the session's own id, the one `clovercode sessions` lists (not a new one)
    first_id = one.output.split("clovercode --resume ")[-1].split()[0]
    assert events[0]["session_id"] == first_id
    listed = cli("sessions", cwd=calc_repo)
    assert first_id in listed.output and listed.output.count("remember 42") == 1, listed.output
    none = cli("exec", "--resume", "nope", "--model", f"replay:{model}", "x", cwd=calc_repo)
    assert none.exit_code == 2 and "nope" in none.output

"""The real CLI: typer's runner for quick checks, a subprocess for exit codes and streams."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from typer.testing import CliRunner

from clovercode import __version__
from clovercode.front.cli import app
from conftest import EXAMPLES, cli_env, default_sigint, run_cli
from test_parser_table import xml

runner = CliRunner()
REPLAY = f"replay:{EXAMPLES / 'calc.replay.jsonl'}"


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"clovercode {__version__}"


def _commands(group, prefix=()):
    for name, command in getattr(group, "commands", {}).items():
        yield (*prefix, name)
        yield from _commands(command, (*prefix, name))


def test_help_on_every_command():
    import typer.main

    group = typer.main.get_command(app)
    paths = [()] + list(_commands(group))
    assert ("fix",) in paths and ("tools", "show") in paths and ("config", "show") in paths
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage:" in result.output


def test_completion_is_offered():
    result = runner.invoke(app, ["--help"])
    assert "--install-completion" in result.output


def test_tools_list_and_show():
    listed = runner.invoke(app, ["tools"])
    assert listed.exit_code == 0
    for name in ("view_file", "list_files", "search_text", "edit_file", "write_file", "run_command", "finish"):
        assert name in listed.output
    shown = runner.invoke(app, ["tools", "show", "edit_file"])
    schema = json.loads(shown.output)
    assert schema["title"] == "edit_file" and schema["additionalProperties"] is False


def test_tools_show_unknown_is_a_usage_error():
    proc = run_cli("tools", "show", "edit")
    assert proc.returncode == 2
    assert "Unknown tool `edit`. Did you mean `edit_file`?" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_show_says_where_values_come_from(tmp_path):
    (tmp_path / "clovercode.toml").write_text("max_steps = 7\n")
    proc = run_cli("config", "show", "--repo", str(tmp_path), "--json", env=cli_env(CLOVERCODE_TEMPERATURE="0.2"))
    shown = json.loads(proc.stdout)
    assert shown["max_steps"] == {"value": 7, "source": str(tmp_path / "clovercode.toml")}
    assert shown["temperature"] == {"value": 0.2, "source": "env CLOVERCODE_TEMPERATURE"}
    assert shown["max_format_errors"]["source"] == "default"
    text = run_cli("config", "show", "--repo", str(tmp_path)).stdout
    assert "max_steps = 7" in text and "CLOVERCODE_MAX_STEPS" in text


def test_broken_config_is_a_clear_usage_error(tmp_path):
    (tmp_path / "clovercode.toml").write_text("max_steps = 'x'\n")
    proc = run_cli("fix", "anything", "--repo", str(tmp_path), "--model", REPLAY)
    assert proc.returncode == 2
    assert f"error: {tmp_path / 'clovercode.toml'}: 'max_steps' must be a whole number" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_fix_exit_code_fixed_and_summary(calc_repo):
    proc = run_cli("fix", "mean is wrong", "--repo", str(calc_repo), "--model", REPLAY, "--sandbox", "none")
    assert proc.returncode == 0, proc.stderr
    assert "Result: fixed" in proc.stdout and "Changed: calc.py" in proc.stdout
    assert "Steps: 4" in proc.stdout and "Trajectory:" in proc.stdout
    assert "WARNING: --sandbox none" in proc.stdout


def test_fix_gave_up_exit_code(calc_repo, tmp_path):
    replay = tmp_path / "r.jsonl"
    replay.write_text("".join(json.dumps({"text": xml("list_files")}) + "\n" for _ in range(5)))
    proc = run_cli("fix", "x", "--repo", str(calc_repo), "--model", f"replay:{replay}", "--max-steps", "2",
                   "--sandbox", "none", "--json")
    assert proc.returncode == 3
    result = json.loads(proc.stdout)
    assert result["status"] == "gave_up" and result["stop_reason"] == "max_steps" and result["steps"] == 2


def test_fix_no_change_exit_code(calc_repo, tmp_path):
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": xml("finish", summary="nothing to do")}) + "\n")
    proc = run_cli("fix", "x", "--repo", str(calc_repo), "--model", f"replay:{replay}", "--sandbox", "none", "--json")
    assert proc.returncode == 4 and json.loads(proc.stdout)["status"] == "no_change"


def test_fix_model_unavailable(calc_repo, tmp_path):
    proc = run_cli("fix", "x", "--repo", str(calc_repo), "--model", f"replay:{tmp_path / 'missing.jsonl'}", "--sandbox", "none")
    assert proc.returncode == 5
    assert "error: replay file not found" in proc.stderr and "Traceback" not in proc.stderr
    as_json = run_cli("fix", "x", "--repo", str(calc_repo), "--model", f"replay:{tmp_path / 'missing.jsonl'}",
                      "--sandbox", "none", "--json")
    assert json.loads(as_json.stdout) == {"status": "error", "exit_code": 5,
                                          "error": f"replay file not found: {tmp_path / 'missing.jsonl'}\n"
                                                   "Pass --model replay:PATH to a JSON Lines file."}


def test_fix_usage_errors(tmp_path):
    missing = run_cli("fix", "x", "--repo", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "project directory not found" in missing.stderr
    no_issue = run_cli("fix")
    # the issue may also come from --issue-file or --github-issue, so the message names all three
    assert no_issue.returncode == 2 and "give the issue exactly one way" in no_issue.stderr


def test_fix_interrupted_exit_code(calc_repo, tmp_path):
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": xml("run_command", command="sleep 60")}) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "fix", "x", "--repo", str(calc_repo),
                             "--model", f"replay:{replay}", "--sandbox", "none", "--json"],
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    deadline = time.monotonic() + 30
    while "run_command" not in _peek_trajectories() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert json.loads(out)["status"] == "interrupted"


def _peek_trajectories() -> str:
    import os
    from pathlib import Path

    base = Path(os.environ["XDG_STATE_HOME"]) / "clovercode" / "trajectories"
    return "".join(p.read_text() for p in base.glob("*.jsonl")) if base.exists() else ""


def test_json_mode_keeps_stdout_clean(calc_repo):
    proc = run_cli("fix", "mean", "--repo", str(calc_repo), "--model", REPLAY, "--sandbox", "none", "--json")
    result = json.loads(proc.stdout)  # the whole of stdout is one JSON object
    assert result["exit_code"] == 0 and result["changed_files"] == ["calc.py"]
    assert "step 1/30" in proc.stderr


def test_repl_options_before_a_command_are_refused_not_ignored(tmp_path):
    # They used to be dropped silently: `clovercode --model M fix …` ran fix with the default model.
    proc = run_cli("--model", f"replay:{tmp_path / 'r.jsonl'}", "-C", str(tmp_path), "config", "show")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "error: --repo, --model before 'config' would be ignored" in proc.stderr
    assert run_cli("config", "show", "-C", str(tmp_path)).returncode == 0


def test_config_show_prints_one_plain_line_per_setting(tmp_path):
    from clovercode.ground.settings import SETTINGS

    # a value that looks like rich markup crashed it (exit 70); long lines were wrapped when piped
    (tmp_path / "clovercode.toml").write_text('fix.author = "[/]odd"\n')  # not trusted: ignored, said on its own line
    proc = run_cli("config", "show", "--repo", str(tmp_path), env=cli_env(COLUMNS="60", CLOVERCODE_MODEL="[/]odd"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(SETTINGS) + 1
    assert lines[0] == 'model = "[/]odd"  # env CLOVERCODE_MODEL · CLOVERCODE_MODEL'
    assert lines[-1] == f'# ignored: fix.author = "[/]odd" from {tmp_path / "clovercode.toml"} (this project is not trusted)'
    assert "serve.max_request_bytes = 4194304  # default · CLOVERCODE_SERVE_MAX_REQUEST_BYTES" in lines


def test_fix_json_still_prints_one_object_when_clovercode_hits_a_bug(calc_repo, monkeypatch):
    import clovercode.front.fixcmd

    def bug(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(clovercode.front.fixcmd, "run_fix", bug)  # stands in for any bug inside the run
    result = runner.invoke(app, ["fix", "x", "--repo", str(calc_repo), "--json"])
    assert result.exit_code == 70
    assert json.loads(result.stdout) == {"status": "error", "exit_code": 70, "error": "internal error: RuntimeError: boom"}
    assert "internal error" in result.stderr and "Traceback" not in result.stderr

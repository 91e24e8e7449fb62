"""`clovercode sandbox check|run`, `bench sandbox`, and how a broken sandbox is reported."""

import json
import os
import stat
from pathlib import Path

from clovercode.ground.config import load_config
from clovercode.ground.errors import ExitCode
from clovercode.executors.select import NO_SANDBOX_WARNING, make_executor
from conftest import EXAMPLES, cli_env, make_git_repo, run_cli


def test_sandbox_check_passes_on_this_host(tmp_path):
    proc = run_cli("sandbox", "check", "--repo", str(make_git_repo(tmp_path / "p")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in ("capabilities dropped", "no network", "environment scrubbed", ".git is read-only",
                 "timeout kills the command", "sandbox check passed"):
        assert line in proc.stdout


def test_sandbox_check_with_network_policy(tmp_path):
    proc = run_cli("sandbox", "check", "--repo", str(tmp_path), "--sandbox", "workspace-write-network")
    assert proc.returncode == 0, proc.stdout
    assert "network shared" in proc.stdout


def test_sandbox_run_reports_exit_code_and_output(tmp_path):
    proc = run_cli("sandbox", "run", "--repo", str(tmp_path), "--", "sh", "-c", "echo out; grep CapEff /proc/self/status; exit 3",
                   cwd=tmp_path)
    assert proc.returncode == 3
    assert "out" in proc.stdout and "CapEff:\t0000000000000000" in proc.stdout


def test_sandbox_run_shell_line_explain_and_timeout(tmp_path):
    proc = run_cli("sandbox", "run", "--repo", str(tmp_path), "--explain", "--", "echo a && echo b", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.split() == ["a", "b"]
    assert "--cap-drop ALL" in proc.stderr and "--unshare-net" in proc.stderr
    proc = run_cli("sandbox", "run", "--repo", str(tmp_path), "--timeout", "0.5", "--", "sleep", "30", cwd=tmp_path)
    assert proc.returncode == 124 and "timed out" in proc.stderr


def test_sandbox_none_is_loudly_warned(tmp_path):
    proc = run_cli("sandbox", "run", "--repo", str(tmp_path), "--sandbox", "none", "--", "echo", "hi", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "hi"
    assert NO_SANDBOX_WARNING in " ".join(proc.stderr.split())
    warnings = []
    make_executor(load_config(tmp_path, {}, {"sandbox": "none"}), tmp_path, warn=warnings.append)
    assert warnings == [NO_SANDBOX_WARNING]


def test_a_project_file_cannot_turn_the_sandbox_off(tmp_path):
    (tmp_path / "clovercode.toml").write_text('sandbox = "none"\n')
    marker = tmp_path / "ran"  # a shell redirection: it would run even without `touch` on the PATH
    proc = run_cli("sandbox", "run", "--repo", str(tmp_path), "--", f": > {marker}", cwd=tmp_path,
                   env=cli_env(PATH=str(tmp_path / "empty-bin")))
    assert proc.returncode == int(ExitCode.SANDBOX_UNAVAILABLE) and not marker.exists()  # ignored, not obeyed
    assert "ignored sandbox (a project may only make the sandbox stricter)" in load_config(tmp_path, {}).declared.notes[0]


def test_missing_bwrap_refuses_instead_of_running_unsandboxed(tmp_path):
    marker = tmp_path / "ran"
    proc = run_cli("sandbox", "run", "--repo", str(tmp_path), "--", f"touch {marker}", cwd=tmp_path,
                   env=cli_env(PATH=str(tmp_path / "empty-bin")))
    assert proc.returncode == int(ExitCode.SANDBOX_UNAVAILABLE)
    assert "bubblewrap (bwrap) is not installed" in proc.stderr and "apt-get install bubblewrap" in proc.stderr
    assert not marker.exists()


def _broken_bwrap(directory: Path) -> dict:
    """A bwrap that fails like one on a host without user namespaces (the host is the seam here)."""
    directory.mkdir()
    fake = directory / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because the kernel "
                    "does not allow non-privileged user namespaces.' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return cli_env(PATH=f"{directory}{os.pathsep}{os.environ['PATH']}")


def test_a_sandbox_that_cannot_start_stops_fix_before_the_model_runs(calc_repo, tmp_path):
    env = _broken_bwrap(tmp_path / "bin")
    proc = run_cli("fix", "mean() is wrong", "--repo", str(calc_repo), "--model",
                   f"replay:{EXAMPLES / 'calc.replay.jsonl'}", "--json", env=env)
    assert proc.returncode == int(ExitCode.SANDBOX_UNAVAILABLE), proc.stderr
    assert json.loads(proc.stdout)["status"] == "error"
    assert "could not create its namespaces" in proc.stderr and "--sandbox none" in proc.stderr
    assert "//" in (calc_repo / "calc.py").read_text()  # nothing was changed


def test_bench_sandbox_prints_a_ratio():
    proc = run_cli("bench", "sandbox", "--runs", "3")
    assert proc.returncode == 0, proc.stderr
    assert "/bin/true" in proc.stdout and "x" in proc.stdout and "ratio" in proc.stdout


def test_bench_sandbox_with_an_unknown_policy_is_a_usage_error():
    proc = run_cli("bench", "sandbox", "--sandbox", "bogus")
    assert proc.returncode == 2 and "unknown policy 'bogus'" in proc.stderr and "Traceback" not in proc.stderr

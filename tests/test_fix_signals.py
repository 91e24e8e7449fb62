"""SIGTERM (how CI cancels a job) and SIGHUP (a closed terminal) end `fix` the way Ctrl-C does: the
sandboxed command is killed, the trajectory gets its end records, one JSON object is printed and the
exit code is 143 / 129. The REPL ends on them without a traceback. Real processes, a real repository,
the real sandbox where this host has one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
from conftest import cli_env, git, make_git_repo

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SANDBOX = "workspace-write" if shutil.which("bwrap") else "none"


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return json.dumps({"text": f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"})


def sleeping(token: str) -> list[int]:
    """Pids of running processes whose command line holds ``token`` (a unique sleep length)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token in (entry / "cmdline").read_bytes().decode("utf-8", "replace"):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return [p for p in pids if p != os.getpid()]


def wait_for(predicate, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
@pytest.mark.parametrize("phase", ["command", "tests", "baseline"])
def test_fix_ends_cleanly_on_a_signal(tmp_path, signum, code, phase):
    work = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    token = f"5{signum}.{os.getpid() % 1000}7"  # a sleep length no other process has
    if phase == "command":
        turns = [call("run_command", command=f"sleep {token}")]
    else:
        # "tests": the run after finish (no baseline); "baseline": the run before the model acts
        baseline = "true" if phase == "baseline" else "false"
        (work / "clovercode.toml").write_text(f'[fix]\ntest_command = "sleep {token}"\nbaseline = {baseline}\n')
        git(work, "add", "clovercode.toml")
        git(work, "commit", "-q", "-m", "slow tests")
        turns = [call("view_file", path="durations.py"),
                 call("edit_file", path="durations.py", old_text="    minutes = seconds // 60",
                      new_text="    minutes = seconds % 3600 // 60"),
                 call("finish", summary="minutes after the hours")]
    replay = tmp_path / "r.jsonl"
    replay.write_text("\n".join(turns) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "fix", "format_duration(5400) gives 1h90m",
                             "--repo", str(work), "--model", f"replay:{replay}", "--sandbox", SANDBOX, "--json"],
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: sleeping(token)), "the command never started"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert len(out.strip().splitlines()) == 1  # exactly one JSON object
    result = json.loads(out)
    assert result["status"] == "interrupted" and result["exit_code"] == code and result["commit"] is None
    assert f"terminated by {signal.Signals(signum).name}" in result["detail"]
    assert "Result: interrupted" in err  # the summary, on stderr with --json
    assert wait_for(lambda: not sleeping(token), 10), "the sandboxed command outlived clovercode"
    if phase == "baseline":  # the model never ran: no trajectory, nothing changed
        assert "while the baseline tests ran" in result["detail"] and result["trajectory"] is None
        assert git(work, "status", "--porcelain").strip() == ""
        return
    records = [json.loads(line) for line in Path(result["trajectory"]).read_text().splitlines()]
    kinds = [r["kind"] for r in records]
    assert "run_end" in kinds and kinds[-1] == "fix_result" and records[-1]["exit_code"] == code
    assert git(work, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_fix_before_the_model_runs_still_prints_one_object(tmp_path, signum, code):
    """A signal while the model is still being prepared (here: an endpoint that never answers)."""
    import socket

    work = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    with socket.socket() as server:  # accepts, never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        url = f"http://127.0.0.1:{server.getsockname()[1]}/v1"
        proc = subprocess.Popen([sys.executable, "-m", "clovercode", "fix", "x", "--repo", str(work), "--endpoint", url,
                                 "--sandbox", "none", "--json"],
                                env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            server.settimeout(60)
            connection, _ = server.accept()
            proc.send_signal(signum)
            out, err = proc.communicate(timeout=30)
            connection.close()
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert len(out.strip().splitlines()) == 1
    assert json.loads(out)["exit_code"] == code


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_repl_ends_without_a_traceback(tmp_path, signum, code):
    work = make_git_repo(tmp_path / "p")
    token = f"6{signum}.{os.getpid() % 1000}3"
    replay = tmp_path / "r.jsonl"
    replay.write_text(call("run_command", command=f"sleep {token}") + "\n" + json.dumps({"text": "done"}) + "\n")
    environment = cli_env(PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm", COLUMNS="120", LINES="40")
    for while_running in (False, True):
        child = pexpect.spawn(sys.executable, ["-m", "clovercode", "--model", f"replay:{replay}", "--approval",
                                               "full-auto", "--sandbox", SANDBOX],
                              cwd=str(work), env=environment, encoding="utf-8", timeout=30, dimensions=(40, 120))
        child.expect_exact("clover>")
        if while_running:
            child.sendline("wait a while")
            assert wait_for(lambda: sleeping(token)), "the command never started"
        child.kill(signum)
        child.expect(pexpect.EOF)
        child.close()
        assert "Traceback" not in child.before
        assert child.exitstatus == code, child.before
        assert wait_for(lambda: not sleeping(token), 10)


def test_a_signal_while_the_prompt_reads_its_history_ends_cleanly(tmp_path):
    """prompt-toolkit reads the history inside its event loop after the prompt shows; a signal then
    must end the REPL like any other (no "Unhandled exception in event loop", no "Press ENTER")."""
    work = make_git_repo(tmp_path / "p")
    history = tmp_path / "history"
    history.write_text("".join(f"\n# 2026-12-02 10:00:{i % 60:02d}.000000\n+task number {i}\n" for i in range(400_000)))
    environment = cli_env(PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm", COLUMNS="120", LINES="40",
                          CLOVERCODE_HISTORY_FILE=str(history))
    (tmp_path / "none.jsonl").write_text(json.dumps({"text": "done"}) + "\n")
    child = pexpect.spawn(sys.executable, ["-m", "clovercode", "--model", "replay:" + str(tmp_path / "none.jsonl"),
                                           "--sandbox", SANDBOX], cwd=str(work), env=environment, encoding="utf-8",
                          timeout=60, dimensions=(40, 120))
    child.expect_exact("clover>")
    child.kill(signal.SIGTERM)
    child.expect(pexpect.EOF)
    child.close()
    assert "Traceback" not in child.before and "Press ENTER" not in child.before, child.before[-2000:]
    assert child.exitstatus == 143


def test_sigterm_while_pushing_still_reports_the_committed_fix(tmp_path):
    """The push hangs (the user's ssh transport stalls on receive-pack; a local remote's own hooks no
    longer run): SIGTERM then still gives the summary, one JSON object naming the local commit, and
    the trajectory's fix_result."""
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    token = f"7{os.getpid() % 1000}.31"
    ssh = tmp_path / "fake-ssh"  # "ssh HOST COMMAND": runs the fetch side here, sleeps on the push side
    ssh.write_text(f'#!/bin/sh\ncase "$2" in *receive-pack*) exec sleep {token} ;; esac\nexec sh -c "$2"\n')
    ssh.chmod(0o755)
    work = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    git(work, "remote", "add", "origin", f"ssh://localhost{origin}")
    subprocess.run(["git", "--git-dir", str(origin), "fetch", "-q", str(work), "main:main"], check=True)
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "fix", "format_duration(5400) gives 1h90m",
                             "--repo", str(work), "--model", f"replay:{FIXTURES / 'durations.replay.jsonl'}",
                             "--sandbox", "none", "--push", "--json"],
                            env=cli_env(GIT_SSH_COMMAND=str(ssh), GIT_SSH_VARIANT="simple"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: sleeping(token)), "the push never started"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in sleeping(token):  # the remote side of the push, which this test started
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 143, err
    assert len(out.strip().splitlines()) == 1
    result = json.loads(out)
    assert result["status"] == "interrupted" and result["commit"] and result["pushed_to"] is None
    assert result["error"] == "terminated by SIGTERM while pushing or opening the pull request"
    assert "Nothing is lost: the fix is committed on the local branch" in " ".join(err.split())
    kinds = [json.loads(line)["kind"] for line in Path(result["trajectory"]).read_text().splitlines()]
    assert kinds[-1] == "fix_result"

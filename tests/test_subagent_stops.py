"""Children stop with their parent (issue 46): `exec --json` whose subagent runs `sleep 60` in the real
sandbox (bwrap) ends on SIGTERM, SIGINT and `--max-time` without waiting for the command: the child's
bwrap, shell and sleep are gone, and the JSON has both child events, the child stopped as `cancelled`
or `max_time`. Real subprocesses, run at once: the test costs about as much as its slowest run."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import cli_env, default_sigint, make_git_repo
from conftest import tool_call_text as call

pytestmark = pytest.mark.slow


def with_marker(marker: str) -> list[int]:
    """The processes whose command line holds ``marker`` (bwrap, the shell, the sleep)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def child_sleeps(tmp_path: Path, name: str, seconds: str) -> Path:
    lines = [{"text": call("task", description="wait", prompt="wait a minute")},
             {"agent": "wait", "text": call("run_command", command=f"sleep {seconds}")},
             {"agent": "wait", "text": "done waiting"},
             {"text": call("finish", summary="waited")}]
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def stopped(work: Path, model: Path, marker: str, how: int | None, *flags: str) -> dict:
    """Run exec until the child's sleep runs, then send ``how`` (None: wait for --max-time); what came out."""
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "exec", "--json", "--model", f"replay:{model}",
                             *flags, "wait for it"], cwd=work, env=cli_env(), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=default_sigint)
    begun = time.monotonic()
    while not any(b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in with_marker(marker)
                  if Path(f"/proc/{pid}").exists()):
        assert proc.poll() is None and time.monotonic() - begun < 60, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.02)
    running = time.monotonic()
    if how is not None:
        proc.send_signal(how)
    out, err = proc.communicate(timeout=60)
    ended = time.monotonic()
    return {"code": proc.returncode, "events": [json.loads(line) for line in out.splitlines()], "stderr": err,
            "after": ended - running, "left": with_marker(marker)}


def test_sigterm_sigint_and_the_deadline_stop_a_childs_sandboxed_command_at_once(tmp_path):
    work = make_git_repo(tmp_path / "p")
    rng = random.Random()
    runs = {}
    for name, how, flags in (("SIGTERM", signal.SIGTERM, ()), ("SIGINT", signal.SIGINT, ()),
                             ("max-time", None, ("--max-time", "4"))):
        marker = f"60.{rng.randrange(10**6):06d}"  # `sleep 60.NNNNNN`: this run's processes, and only them
        runs[name] = (work, child_sleeps(tmp_path, f"{name}.jsonl", marker), marker, how, *flags)
    with ThreadPoolExecutor(len(runs)) as pool:
        done = dict(zip(runs, pool.map(lambda args: stopped(*args), runs.values())))
    for name, run in done.items():
        events, where = run["events"], f"{name}: {run['stderr'][-2000:]}"
        kinds = [e["type"] for e in events]
        assert "Traceback" not in run["stderr"], where
        assert not run["left"], f"{name}: processes of the child left: {run['left']}"
        assert kinds.count("subagent_started") == 1 and kinds.count("subagent_completed") == 1, where + str(kinds)
        child = next(e for e in events if e["type"] == "subagent_completed")
        assert "left behind" not in child["detail"], child  # it stopped within STOP_WAIT (2 s), by itself
        assert kinds[-1] == "run_completed" and kinds.count("run_completed") == 1, where
        assert run["after"] < (10 if name == "max-time" else 6), f"{name}: {run['after']:.1f} s"  # not the 60 s sleep
    assert done["SIGTERM"]["code"] == 143 and done["SIGINT"]["code"] == 130
    for name in ("SIGTERM", "SIGINT"):
        child = next(e for e in done[name]["events"] if e["type"] == "subagent_completed")
        assert child["stop_reason"] == "cancelled" and "stopped by its parent" in child["detail"], child
    timed = done["max-time"]["events"]
    child = next(e for e in timed if e["type"] == "subagent_completed")
    assert child["stop_reason"] == "max_time" and timed[-1]["stop_reason"] == "max_time", timed[-3:]
    assert done["max-time"]["code"] == timed[-1]["exit_code"]


def test_esc_in_the_repl_stops_a_childs_sandboxed_command_and_the_session_goes_on(tmp_path):
    """On a real pty: Esc while a subagent's `sleep 60` runs in bwrap ends the turn at once, with the
    child's processes gone; the next prompt works."""
    import pexpect

    from pty_screen import PROMPT, spawn_repl

    work = make_git_repo(tmp_path / "p")
    marker = f"60.{random.Random().randrange(10**6):06d}"
    model = child_sleeps(tmp_path, "m.jsonl", marker)
    lines = model.read_text().splitlines()
    model.write_text("\n".join([*lines[:2], json.dumps({"text": "The answer is 42."})]) + "\n")
    child = spawn_repl(work, "--model", f"replay:{model}", "--approval", "full-auto")
    try:
        child.expect_exact(PROMPT)
        child.sendline("wait for it")
        begun = time.monotonic()
        while not with_marker(marker):
            assert time.monotonic() - begun < 60, "the child's command never started"
            try:
                child.read_nonblocking(size=65536, timeout=0.05)
            except pexpect.TIMEOUT:
                pass
        child.send("\x1b")  # Esc
        pressed = time.monotonic()
        child.expect_exact("interrupted by the user")
        child.expect_exact(PROMPT)
        at_prompt = time.monotonic() - pressed
        left = with_marker(marker)
        child.sendline("and now?")
        child.expect_exact("The answer is 42.")
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert not left, f"processes of the child left after Esc: {left}"
    assert at_prompt < 6, f"{at_prompt:.1f} s from Esc to the prompt"  # not the 60 s sleep


def test_a_childs_question_on_a_real_pty_runs_its_command_when_allowed_and_esc_cancels_the_run(tmp_path,
                                                                                                isolated_home):
    """A child's command in `suggest` mode is asked about on the person's terminal (one child at a
    time): `y` runs it in the child's sandbox; Esc at the next child's question cancels the whole turn,
    and the session goes on."""
    import pexpect

    from pty_screen import PROMPT, screen_text, spawn_repl, wait_screen

    work = make_git_repo(tmp_path / "p")
    lines = [{"text": call("task", description="look", prompt="run it")},
             {"agent": "look", "text": call("run_command", command="echo child-ran-$((40+2))")},
             {"agent": "look", "text": "the child saw it"},
             {"text": "Parent done."},
             {"text": call("task", description="again", prompt="run it again")},
             {"agent": "again", "text": call("run_command", command="echo never-$((1+1))")}]
    model = tmp_path / "m.jsonl"
    model.write_text("".join(json.dumps(line) + "\n" for line in lines))
    child = spawn_repl(work, "--model", f"replay:{model}", "--approval", "suggest")
    try:
        child.expect_exact(PROMPT)
        child.sendline("go")
        wait_screen(child, "Esc cancels the run")
        assert "$ echo child-ran-$((40+2))" in screen_text(child)
        child.send("y")
        child.expect_exact("Parent done.")
        child.expect_exact(PROMPT)
        child.sendline("once more")
        wait_screen(child, "$ echo never-$((1+1))")
        child.send("\x1b")  # Esc at the child's question
        child.expect_exact("cancelled by the user at an approval prompt")
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    records = {path.name.split(".", 1)[1].split("-")[1]: [json.loads(x) for x in path.read_text().splitlines()]
               for path in isolated_home.rglob("subagents/*.jsonl")}
    ran = [e["text"] for e in records["look"] if e["kind"] == "observation" and e["name"] == "run_command"]
    assert len(ran) == 1 and "child-ran-42" in ran[0]
    assert not [e for e in records["again"] if e["kind"] == "observation" and "never-2" in e.get("text", "")]
    assert records["again"][-1]["kind"] == "run_end" and records["again"][-1]["stop_reason"] == "interrupted"

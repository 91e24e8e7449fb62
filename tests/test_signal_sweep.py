"""Signals at every moment (issue 35): from the moment ``python -m clovercode`` has its handlers (the
first lines of __main__.py; before that is the interpreter's own start-up, the one documented
exception) to the exit, SIGINT / SIGTERM / SIGHUP give one JSON answer and 130 / 143 / 129, never a
traceback or exit 1; a second signal during the shutdown is absorbed. Real subprocesses, in parallel:
the sweep costs about as much as its slowest run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conftest import cli_env, make_git_repo
from conftest import tool_call_text as call
from conftest import write_replay as replay

CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


def handlers_installed(pid: int) -> bool:
    """Whether the process catches SIGTERM yet (the kernel's view: /proc/PID/status SigCgt)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except OSError:
        pass
    return False


def signalled(args: list[str], cwd: Path, delay: float, first: int, second: int | None = None,
              gap: float = 0.0) -> tuple[subprocess.CompletedProcess, float]:
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", *args], cwd=cwd, env=cli_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    begun = time.monotonic()
    while not handlers_installed(proc.pid) and proc.poll() is None:
        time.sleep(0.001)
    ready = time.monotonic() - begun
    time.sleep(delay)
    proc.send_signal(first)
    if second is not None:
        time.sleep(gap)
        proc.send_signal(second)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), ready


def test_signals_at_every_moment_give_one_answer_and_their_code(tmp_path):
    sleeper = replay(tmp_path / "m.jsonl", call("run_command", command="sleep 30"))
    work = make_git_repo(tmp_path / "p")
    (work / "a.py").write_text("")
    # exec refuses commands outside the sandbox (nobody can be asked), so its sleeper runs in bwrap
    exec_args = ["exec", "--json", "--model", f"replay:{sleeper}", "wait"]
    fix_args = ["fix", "--json", "--sandbox", "none", "--repo", str(work), "--model", f"replay:{sleeper}",
                "--test-command", "none", "wait"]
    runs = [(exec_args, d, signal.SIGTERM, None, 0.0) for d in (0.0, 0.1, 0.3, 0.6, 1.0, 2.0, 3.0)]
    runs += [(fix_args, d, s, None, 0.0) for d, s in ((0.0, signal.SIGHUP), (0.4, signal.SIGTERM), (1.2, signal.SIGINT),
                                                      (2.5, signal.SIGTERM))]
    runs += [(exec_args, 1.0, signal.SIGTERM, second, gap) for second, gap in
             ((signal.SIGTERM, 0.02), (signal.SIGINT, 0.3), (signal.SIGHUP, 0.6))]
    runs += [(fix_args, 1.0, signal.SIGINT, signal.SIGTERM, 0.3)]
    with ThreadPoolExecutor(len(runs)) as pool:
        done = list(pool.map(lambda r: (r, signalled(r[0], tmp_path, *r[1:])), runs))
    for (args, delay, first, second, gap), (proc, ready) in done:
        where = f"{args[0]} {signal.Signals(first).name} at +{delay}s (handlers after {ready:.2f}s)" + \
                (f", then {signal.Signals(second).name} +{gap}s" if second else "")
        assert "Traceback" not in proc.stderr, where + proc.stderr
        assert proc.returncode == CODES[first], f"{where}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-2000:]}"
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        if args[0] == "fix":
            assert len(lines) == 1 and lines[0]["exit_code"] == CODES[first], where + proc.stdout
            assert lines[0]["status"] == "interrupted", where
        else:
            assert [e["type"] for e in lines].count("run_completed") == 1, where + proc.stdout
            assert [e["type"] for e in lines][-2:] == ["error", "run_completed"], where + proc.stdout
            assert lines[-1]["exit_code"] == CODES[first], where + proc.stdout


WRAPPED_WHILE_LOADING = """
import builtins, os, signal, sys
import clovercode.__main__ as entry

real_import = builtins.__import__


def loading(name, *args, **kwargs):
    # as rich's class creation did in a whole run: the SIGTERM's Terminated raised inside a class's
    # __set_name__, which Python 3.11 wraps in a RuntimeError
    if name == "clovercode.front.cli":
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(10_000))  # the handler raises here
        except BaseException as exc:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from exc
    return real_import(name, *args, **kwargs)


builtins.__import__ = loading
sys.argv = ["clovercode", "exec", "--json", "wait"]
entry.main()
"""


def test_a_signal_python_wraps_while_the_cli_loads_is_still_the_signal(tmp_path):
    proc = subprocess.run([sys.executable, "-c", WRAPPED_WHILE_LOADING], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["exit_code"] == 143

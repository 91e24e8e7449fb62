"""Tests that interrupt a child restore its SIGINT (conftest.default_sigint): started under ``nohup``,
``cmd &`` or a CI runner that ignores SIGINT, pytest would otherwise hand the ignore down and every
Ctrl-C test would time out (issue 25)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from conftest import default_sigint

TESTS = Path(__file__).resolve().parent
WAIT = "import sys, time; print('ready', flush=True); time.sleep(30)"


def _interrupt(wait: float, **popen) -> int:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as pytest under nohup
    try:
        proc = subprocess.Popen([sys.executable, "-c", WAIT], stdout=subprocess.PIPE, text=True, **popen)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        return proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        return 0
    finally:
        proc.kill()
        proc.wait()


def test_an_ignored_sigint_is_inherited_and_default_sigint_undoes_it():
    assert _interrupt(1.0) == 0  # still sleeping a second later: the Ctrl-C was ignored (killed afterwards)
    assert _interrupt(10.0, preexec_fn=default_sigint) != 0  # KeyboardInterrupt


def test_every_test_that_interrupts_a_child_restores_its_sigint():
    """A new Ctrl-C test without the helper fails here instead of only under nohup."""
    missing = []
    for path in sorted(TESTS.glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if path.name == Path(__file__).name:
            continue
        if re.search(r"send_signal\(signal\.SIGINT\)|sendintr\(\)|sendcontrol\(['\"]c['\"]\)", text) and \
                "default_sigint" not in text and "spawn_repl" not in text:  # pty_screen.spawn_repl has it
            missing.append(path.name)
    assert missing == []

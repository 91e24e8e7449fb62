"""A command run for work that is stopped from another thread (a subagent whose parent was
interrupted) is killed at once, whole: the sandbox (bwrap and its PID namespace) or the process group,
background children included; the thread that ran it gets CommandStopped."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from clovercode.executors.base import CommandStopped, with_stop
from clovercode.executors.bwrap import BwrapExecutor
from clovercode.executors.local import LocalExecutor
from clovercode.sandboxing.policy import load_policy
from test_subagent_stops import with_marker




@pytest.mark.parametrize("sandboxed", [False, True], ids=["process-group", "bwrap"])
def test_a_stopped_command_is_killed_with_everything_it_started(tmp_path, sandboxed):
    marker = f"30.{random.Random().randrange(10**6):06d}"
    stop = threading.Event()
    base = (BwrapExecutor(load_policy("workspace-write"), tmp_path, {"PATH": os.environ["PATH"]}) if sandboxed
            else LocalExecutor())
    executor = with_stop(base, stop)
    assert base.stop is None  # a copy: the parent's own executor is not stopped with the child's group

    def stop_when_running() -> None:
        deadline = time.monotonic() + 30
        while len(with_marker(marker)) < 2 and time.monotonic() < deadline:  # the background sleep and the other
            time.sleep(0.01)
        stop.set()
    threading.Thread(target=stop_when_running, daemon=True).start()
    began = time.monotonic()
    with pytest.raises(CommandStopped):
        executor.run(f"sleep {marker} & sleep {marker}; wait", tmp_path, 60)
    assert time.monotonic() - began < 30  # not the command's own 30 s
    # SIGKILL went to the whole group; a background member not our child dies when the kernel next runs
    # it, a moment later on a loaded machine: gone within seconds, not the 30 s it asked for
    gone_by = time.monotonic() + 5
    while with_marker(marker) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert with_marker(marker) == []


def test_a_command_runs_to_its_end_while_the_stop_is_not_set(tmp_path):
    result = with_stop(LocalExecutor(), threading.Event()).run("echo fine", tmp_path, 10)
    assert result.exit_code == 0 and result.output.strip() == "fine"

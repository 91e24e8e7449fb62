"""Run a process with stdin closed, a timeout that kills its whole process group, and output kept
as head + tail within a byte budget, so a command printing 100 MB costs a few kilobytes of memory."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from clovercode.executors.base import CommandStopped, StopSignal
from clovercode.ground.termination import ENDING

OnOutput = Callable[[bytes], None]  # each chunk as it is read, for a front end that shows it live


DRAIN_SECONDS = 0.3


class OutputCap:
    """Keeps the first ``limit/2`` and the last ``limit/2`` bytes of a stream; counts what it drops."""

    def __init__(self, limit: int):
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > 2 * self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    @property
    def omitted(self) -> int:
        return max(0, self.total - len(self.head) - min(len(self.tail), self.tail_limit))

    def text(self) -> str:
        tail = bytes(self.tail[-self.tail_limit:]) if self.tail_limit else b""
        head = bytes(self.head).decode("utf-8", errors="replace")
        if not self.omitted:
            return head + tail.decode("utf-8", errors="replace")
        note = f"\n[… {self.omitted} bytes of output omitted; showing the first and last part …]\n"
        return head + note + tail.decode("utf-8", errors="replace")


def run_captured(argv: Sequence[str], cwd: Path, timeout: float, env: Mapping[str, str] | None,
                 limit: int, pass_fds: Sequence[int] = (),
                 on_output: OnOutput | None = None,
                 stop: StopSignal | None = None) -> tuple[int | None, str, bool, int, float]:
    """Run ``argv``; return (exit_code or None, capped output, timed_out, omitted_bytes, seconds).
    ``pass_fds`` stay open in the child (bwrap's status pipe); ``on_output`` sees every chunk; once
    ``stop`` is set the process group is killed and :class:`CommandStopped` raised (any thread)."""
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv), cwd=cwd, env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so the timeout kills children too
        pass_fds=tuple(pass_fds),
    )
    try:
        return _pump(proc, start, timeout, limit, on_output, stop)
    finally:  # also on KeyboardInterrupt: never leave the command running behind the user
        kill_group(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def _pump(proc: subprocess.Popen, start: float, timeout: float, limit: int,
          on_output: OnOutput | None = None, stop: StopSignal | None = None) -> tuple[int | None, str, bool, int, float]:
    cap = OutputCap(limit)
    timed_out = False
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        deadline = start + timeout
        exited_at: float | None = None
        while True:
            ENDING.check()  # a signal whose interrupt was lost ends the command here (main thread only)
            if stop is not None and stop.is_set():  # the finally of run_captured kills the group
                raise CommandStopped("stopped by the parent")
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            # Background children may hold the pipe open after the command itself ended:
            # drain briefly, then stop (they are killed with the process group below).
            if exited_at is not None and now - exited_at > DRAIN_SECONDS:
                break
            if not sel.select(timeout=min(deadline - now, 0.1 if exited_at else 0.25)):
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:  # EOF: every writer (including background children) closed the pipe
                break
            cap.feed(chunk)
            if on_output is not None:
                on_output(chunk)
    if not timed_out:
        try:
            proc.wait(timeout=max(0.01, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    kill_group(proc)  # the timeout's kill, or the end of any background children left behind
    code = None if timed_out else proc.returncode
    return code, cap.text(), timed_out, cap.omitted, time.monotonic() - start


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group led by ``proc`` and reap ``proc``."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a zombie we cannot reap
        pass

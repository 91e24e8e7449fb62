"""The editor's first line, read (and answered, when it is a plain ``initialize``) while the SDK loads.

A thread reads stdin up to the first newline and, when ``handshake.plain_initialize`` takes that
line, writes clovercode's answer at once on its own copy of the protocol's fd. Whatever it read is
then handed over (``Handoff``): ``server.serve`` puts the bytes in front of the SDK's reader, so the
connection sees the same stream it would have read itself, and the transport replays the answered
request under a private id and drops the SDK's second answer to it (after comparing the two).

Only a line the allowlist takes is answered here; anything else (a malformed line, another method,
a line longer than ``CAP``, the end of input) is left for the SDK path, byte for byte.
"""

from __future__ import annotations

import os
import select
import threading
from dataclasses import dataclass
from typing import Any

from clovercode.front.acp.handshake import answer_line, plain_initialize

CAP = 64 * 1024  # an initialize is a few hundred bytes; a first line longer than this is the SDK path's to judge
CHUNK = 64 * 1024


@dataclass(frozen=True)
class Handoff:
    """What the thread took from stdin: ``prefix`` (bytes the SDK's reader must see first) and, when
    the first line was answered here, that request (``answered``), which is not in ``prefix``."""

    prefix: bytes
    answered: dict[str, Any] | None = None


class FirstLine:
    """One thread, started once per process, before anything else reads fd ``stdin``."""

    def __init__(self, stdin: int = 0, stdout: int = 1):
        self.stdin = stdin
        self.out = os.dup(stdout)  # its own copy: the command points fd 1 at stderr meanwhile (command.py)
        self.done = threading.Event()
        self.handoff = Handoff(b"")
        self.thread = threading.Thread(target=self._run, name="acp-first-line", daemon=True)
        self.thread.start()

    def wait(self) -> Handoff:
        """The handoff, once the first line (or the end of input) has come. A signal interrupts the wait."""
        self.done.wait()
        return self.handoff

    def _run(self) -> None:
        try:
            data = _read_first_line(self.stdin)
            self.handoff = Handoff(data)  # what stands unless the line is answered here
            self.handoff = _answer(data, self.out)
        finally:
            try:
                os.close(self.out)
            finally:
                self.done.set()


def _answer(data: bytes, out: int) -> Handoff:
    """Answer the first line of ``data`` on ``out`` when it is a plain initialize."""
    end = data.find(b"\n")
    if end < 0:
        return Handoff(data)  # the end of input, an error or an over-long line: the SDK's to judge
    request = plain_initialize(data[:end + 1])
    if request is None:
        return Handoff(data)
    try:
        _write_all(out, answer_line(request["id"]))
    except OSError:  # the editor closed our stdout: the SDK path meets the same and does what it does
        return Handoff(data)
    return Handoff(data[end + 1:], request)


def _read_first_line(fd: int) -> bytes:
    """Bytes from ``fd`` until one holds a newline, the input ends, it fails, or more than CAP came."""
    data = bytearray()
    while b"\n" not in data and len(data) <= CAP:
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:  # a non-blocking stdin (set so by the parent): wait until it is readable
            select.select([fd], [], [])
            continue
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [])

"""SIGTERM and SIGHUP take the Ctrl-C path: the running command is killed, the trajectory gets its
end record, the summary (or the one JSON object) is printed, and the exit code is 128 + the signal.

CI cancels a job with SIGTERM and a closed terminal sends SIGHUP; without a handler Python dies at
once, with nothing on stdout. The handler raises :class:`Terminated`, a KeyboardInterrupt, so every
place that already cleans up after Ctrl-C does the same for these.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

CAUGHT = (signal.SIGTERM, signal.SIGHUP)
CTRL_C_EXIT = 130


class Terminated(KeyboardInterrupt):
    """The process was asked to end by ``signum`` (SIGTERM, SIGHUP)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_code(signum: int | None) -> int:
    """The exit code of a run stopped by ``signum`` (None: Ctrl-C)."""
    return CTRL_C_EXIT if signum is None else 128 + signum


def interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The interrupt (Ctrl-C, or a signal turned into one here) that ``exc`` was raised while handling,
    if any. Library clean-up code can replace an interrupt with an error of its own: Ctrl-C inside
    ``numpy.savez`` comes out of zipfile's ``close`` as a ValueError. Such an error is the interrupt."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return current
        seen.add(id(current))
        current = current.__context__
    return None


def interrupt_detail(exc: BaseException) -> str:
    """Why an interrupted run stopped, for people."""
    if isinstance(exc, Terminated):
        return f"terminated by {exc.name}"
    return "interrupted by the user (Ctrl-C)"


def raise_from_start(signums: tuple[int, ...] = CAUGHT) -> None:
    """At start-up, before anything slow is imported: the first of ``signums`` raises :class:`Terminated`
    (later ones are ignored, so the clean-up it starts is not cut short). Commands that catch the
    signals themselves put their handlers over this one."""
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if not fired:
            fired.append(signum)
            raise Terminated(signum)

    for signum in signums:
        signal.signal(signum, handler)


@contextmanager
def on_first_signal(act: Callable[[int], None], signums: tuple[int, ...] = CAUGHT) -> Iterator[list[int]]:
    """While inside, the first of ``signums`` calls ``act(signum)`` in the main thread; later ones are
    ignored, so the clean-up the first one started is not cut short (a CI runner that wants the
    process gone at once sends SIGKILL). Yields the signals that fired; the previous handlers come
    back on exit."""
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if not fired:
            fired.append(signum)
            act(signum)

    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield fired
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextmanager
def signals_as_interrupts(signums: tuple[int, ...] = CAUGHT) -> Iterator[None]:
    """While inside, the first of ``signums`` raises :class:`Terminated` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int) -> None:
        raise Terminated(signum)

    with on_first_signal(interrupt, signums):
        yield

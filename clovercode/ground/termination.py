"""SIGTERM and SIGHUP take the Ctrl-C path: the running command is killed, the trajectory gets its
end record, the summary (or the one JSON object) is printed, and the exit code is 128 + the signal.

CI cancels a job with SIGTERM and a closed terminal sends SIGHUP; without a handler Python dies at
once, with nothing on stdout. The handler raises :class:`Terminated`, a KeyboardInterrupt, so every
place that already cleans up after Ctrl-C does the same for these.

A raise from a signal handler lands wherever the main thread happens to be, and where that is a
``__del__`` or a weakref callback (importlib and the garbage collector run them at any moment) Python
discards it with an "Exception ignored" line: the run would go on as if nothing had happened. So the
raise is never the only record. :data:`ENDING` keeps the signal until code of ours has caught its
interrupt (``delivered``); the check points (:meth:`Ending.check`: between steps, at every model event,
while a command runs) raise it again until then, and an interrupt Python reports as discarded is
noted (``lost``) so the next check point raises it and a later signal acts instead of being absorbed.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

CAUGHT = (signal.SIGTERM, signal.SIGHUP)
ENDING_SIGNALS = (signal.SIGINT, *CAUGHT)
CTRL_C_EXIT = 130


class Ending:
    """The process's one ending: the first signal that ends the run, and whether the run's answer (the
    JSON object, run_completed) is out. Signals are process-wide, so this record is too: every
    handler here consults it, so a second signal, whichever handler is installed by then, is absorbed
    (unless the first one's interrupt was lost: :meth:`take`)."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first ending signal (SIGINT included)
        self.answered: int | None = None  # the exit code the answer written on stdout states
        self.repeat_sigint = False  # the REPL: Ctrl-C cancels a turn and the session goes on
        self.holding = False  # an answer is being written: a first signal waits until it is out
        self.held: int | None = None
        self.delivered = False  # code of ours caught the ending's interrupt and is acting on it
        self.lost: KeyboardInterrupt | None = None  # an interrupt Python discarded (raised inside a __del__)

    def take(self, signum: int) -> bool:
        """Whether ``signum`` is the run's ending signal (to act on now); False: absorbed or held.
        A repeat is absorbed, so the clean-up the first one started is not cut short, unless the first
        one's interrupt was lost before any code of ours saw it: then the repeat acts (as the first)."""
        if self.signum is not None:
            if self.lost is not None and not self.delivered and not self.holding:
                self.lost = None
                return True
            return False
        if signum == signal.SIGINT and self.repeat_sigint:
            return True  # not recorded: the next Ctrl-C is a new one
        if self.holding:
            self.held = self.held or signum
            return False
        self.signum = signum
        return True

    def acting_on(self, signum: int) -> int:
        """The signal a handler that got True from :meth:`take` for ``signum`` raises for: the first."""
        return self.signum if self.signum is not None else signum

    def deliver(self) -> None:
        """Code of ours caught the ending's interrupt and is acting on it: check points stop raising it."""
        if self.signum is not None and threading.current_thread() is threading.main_thread():
            self.delivered = True

    def check(self) -> None:
        """A check point, in the main thread (elsewhere a no-op): raise an interrupt Python discarded, or
        the ending signal's interrupt while no code of ours has caught it yet."""
        if threading.current_thread() is not threading.main_thread() or self.holding:
            return
        lost, self.lost = self.lost, None
        if lost is not None and not (self.signum is not None and self.delivered):
            raise lost
        if self.signum is not None and not self.delivered:
            raise interrupt_for(self.signum)

    def exit_code(self, code: int) -> int:
        """The process's exit code: what the answer said if one is out, else the first signal's, else ``code``."""
        if self.answered is not None:
            return self.answered
        return exit_code(None if self.signum == signal.SIGINT else self.signum) if self.signum is not None else code


ENDING = Ending()


def _note_lost(unraisable: "sys.UnraisableHookArgs") -> None:
    """sys.unraisablehook: an interrupt raised where Python cannot pass it on (a ``__del__``, a weakref
    callback) is kept for the next check point, and not printed as an error: it is acted on."""
    exc = unraisable.exc_value
    if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
        ENDING.lost = exc
        return
    _PREVIOUS_HOOK[0](unraisable)


_PREVIOUS_HOOK = [sys.unraisablehook]


def note_lost_interrupts() -> None:
    """Install :func:`_note_lost` (once; the hook that was there still hears everything else)."""
    if sys.unraisablehook is not _note_lost:
        _PREVIOUS_HOOK[0] = sys.unraisablehook
        sys.unraisablehook = _note_lost


def interrupt_for(signum: int) -> KeyboardInterrupt:
    """What the ending signal raises in the main thread: Ctrl-C's KeyboardInterrupt, or Terminated."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


@contextmanager
def answering(code: int) -> Iterator[None]:
    """Around writing the run's answer: a first signal meanwhile waits until it is written (then
    acts), so the answer is never cut, and the exit code is the one the answer states."""
    ENDING.holding = True
    try:
        yield
        ENDING.answered = code
    finally:
        ENDING.holding = False
        held, ENDING.held = ENDING.held, None
    if held is not None and ENDING.take(held):
        raise interrupt_for(held)


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
    ``numpy.savez`` comes out of zipfile's ``close`` as a ValueError, and Python 3.11 wraps an exception
    raised in a class's ``__set_name__`` in a RuntimeError (a signal while a module defines its
    dataclasses). Such an error is the interrupt."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def interrupt_detail(exc: BaseException) -> str:
    """Why an interrupted run stopped, for people."""
    if isinstance(exc, Terminated):
        return f"terminated by {exc.name}"
    return "interrupted by the user (Ctrl-C)"


def raise_from_start(signums: tuple[int, ...] = ENDING_SIGNALS) -> None:
    """At start-up, before anything slow is imported: the first of ``signums`` raises (Ctrl-C's
    KeyboardInterrupt, or :class:`Terminated`); later ones are absorbed, so the clean-up it starts is
    not cut short (:class:`Ending`). Commands that catch the signals themselves put their handlers over
    this one; a signal the interpreter saw before this ran is reported here."""

    def handler(signum: int, frame: object) -> None:
        if ENDING.take(signum):
            raise interrupt_for(ENDING.acting_on(signum))

    note_lost_interrupts()
    for signum in signums:
        signal.signal(signum, handler)


def absorb_all() -> None:
    """From here to the exit, ending signals are ignored: the interpreter's shutdown puts the default
    handlers back, and a late SIGTERM would then kill the process after its answer, with another code."""
    for signum in ENDING_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


@contextmanager
def on_first_signal(act: Callable[[int], None], signums: tuple[int, ...] = CAUGHT) -> Iterator[list[int]]:
    """While inside, the first of ``signums`` calls ``act(signum)`` in the main thread; later ones are
    ignored, so the clean-up the first one started is not cut short (a CI runner that wants the
    process gone at once sends SIGKILL), unless the first one's interrupt was lost (:class:`Ending`).
    Yields the signals that fired; the previous handlers come back on exit."""
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if ENDING.take(signum):
            signum = ENDING.acting_on(signum)
            fired.append(signum)
            act(signum)

    note_lost_interrupts()
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

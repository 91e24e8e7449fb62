"""``--max-time`` inside a step: at the deadline the main thread is interrupted the way Esc and
Ctrl-C interrupt it (the running command is killed, the model's stream closed, every pending call
answered), and the run stops as ``max_time``. Between steps the loop's own check still applies."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from clovercode.ground.termination import ENDING


class TimeLimitReached(KeyboardInterrupt):
    """The run's wall-clock budget ran out while a step was under way."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """While inside, :class:`TimeLimitReached` is raised in the main thread ``seconds`` from now (0:
    never). A real timer (SIGALRM): a blocking read or a child's wait is interrupted too. Elsewhere
    than in the main thread, only the loop's check between steps holds."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def ring(signum: int, frame: object) -> None:
        if ENDING.signum is None:  # a run already ending by a signal keeps that reason
            raise TimeLimitReached(f"the time limit ({seconds:g} s) was reached")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

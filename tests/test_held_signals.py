"""The clean-up's held signals: held inside the block, put back after it, whatever interrupts, and
whichever thread the system hands a signal to."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from clovercode.vcs import cleancheckout
from clovercode.vcs.cleancheckout import STOP_SIGNALS, held_signals


def handlers() -> dict:
    return {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}


@pytest.fixture
def recorded_sigterm():
    got = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    yield got
    signal.signal(signal.SIGTERM, previous)


def test_a_signal_sent_during_the_block_arrives_after_it_once(recorded_sigterm):
    before = handlers()
    with held_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        assert recorded_sigterm == []  # held
    assert recorded_sigterm == [signal.SIGTERM]
    assert handlers() == before


def test_a_signal_another_thread_receives_is_held_too(recorded_sigterm):
    # The system may hand a process's signal to any thread; its Python handler still runs in the main
    # thread. Held by the main thread's signal mask, this one came through mid-clean-up (a whole suite run).
    other = threading.Event()
    thread = threading.Thread(target=other.wait, args=(10,), daemon=True)
    thread.start()
    try:
        with held_signals():
            signal.pthread_kill(thread.ident, signal.SIGTERM)
            for _ in range(50):  # time for the thread to take it and the main thread to run a handler
                time.sleep(0.01)
            assert recorded_sigterm == []
    finally:
        other.set()
    assert recorded_sigterm == [signal.SIGTERM]


def test_an_interrupt_while_the_handlers_are_swapped_puts_every_one_back(monkeypatch):
    before = handlers()
    real = signal.signal
    swapped = []

    def swapping_then_interrupted(signum, handler):
        previous = real(signum, handler)
        swapped.append(signum)
        if len(swapped) == 2:  # as if Ctrl-C's handler ran the moment the second swap returned
            raise KeyboardInterrupt
        return previous

    monkeypatch.setattr(cleancheckout.signal, "signal", swapping_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        with held_signals():
            pass
    monkeypatch.undo()
    assert handlers() == before


def test_a_process_started_during_the_block_can_be_stopped():
    import subprocess
    import sys

    with held_signals():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    child.terminate()
    assert child.wait(timeout=10) == -signal.SIGTERM

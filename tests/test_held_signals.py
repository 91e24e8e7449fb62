"""The clean-up's held signals: held inside the block, put back after it, whatever interrupts."""
from __future__ import annotations

import os
import signal

import pytest

from clovercode.vcs import cleancheckout
from clovercode.vcs.cleancheckout import STOP_SIGNALS, held_signals


def mask() -> set:
    return signal.pthread_sigmask(signal.SIG_BLOCK, ())


def test_a_signal_sent_during_the_block_arrives_after_it():
    before = mask()
    got = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        with held_signals():
            assert set(STOP_SIGNALS) <= mask()
            os.kill(os.getpid(), signal.SIGTERM)
            assert got == []  # held
        assert got == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert mask() == before


def test_an_interrupt_the_moment_the_signals_are_held_still_puts_the_mask_back(monkeypatch):
    # A Ctrl-C whose handler runs as the blocking call returns (before the block is entered) once left
    # SIGINT blocked for good: every process started after it could no longer be interrupted
    before = mask()
    real = signal.pthread_sigmask

    def blocking_then_interrupted(how, signals):
        result = real(how, signals)
        if how == signal.SIG_BLOCK and signals:
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(cleancheckout.signal, "pthread_sigmask", blocking_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        with held_signals():
            pass
    monkeypatch.undo()
    assert mask() == before

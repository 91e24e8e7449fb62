"""The key watcher of a REPL turn (ui/keys.py): Esc told apart from escape sequences, typed text kept,
and the terminal's settings back on every way out, on a real pseudo-terminal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import termios
import threading

import pytest

from clovercode.ground.termination import Terminated, signals_as_interrupts
from clovercode.ui.keys import KeyWatcher, TypedAhead


@pytest.mark.parametrize("chunks, escapes, text", [
    ([(b"\x1b", True)], 1, ""),  # Esc and nothing after it
    ([(b"\x1b", False), (b"[A", False)], 0, ""),  # an arrow key cut in two: not Esc
    ([(b"\x1b[A\x1b[1;5C\x1bOP", False)], 0, ""),  # Up, Ctrl-Right, F1
    ([(b"ab\x1b", False), (b"", True)], 1, "ab"),
    ([(b"\x1b\x1b", True)], 2, ""),  # twice
    ([(b"\x1bx", False)], 0, ""),  # Alt-x
    ([(b"\x1b[", True)], 0, ""),  # a sequence that never finished: dropped, not Esc
    ([("héllo\x7f\x7fo wörld".encode(), False)], 0, "hélo wörld"),  # Backspace edits
    ([(b"one\rtwo", False)], 0, "two"),  # Enter queues "one" (below)
    ([(b"junk\x15kept\x04\t\x1a\x07", False)], 0, "kept"),  # Ctrl-U clears the line, other controls do nothing
    ([("é".encode()[:1], False), ("é".encode()[1:], False)], 0, "é"),  # a character split across reads
])
def test_typed_ahead_tells_esc_from_sequences(chunks, escapes, text):
    typed = TypedAhead()
    assert sum(typed.feed(data, settled) for data, settled in chunks) == escapes
    assert typed.take() == text and typed.take() == ""


def test_enter_queues_the_line_and_backspace_on_an_empty_line_takes_the_last_one_back():
    typed = TypedAhead()
    typed.feed(b"run the tests\r\r  \rthen commit\rdraft", False)
    assert typed.queued == ["run the tests", "then commit"] and typed.text == "draft"
    typed.feed(b"\x15\x7f", False)  # Ctrl-U clears the draft; Backspace on nothing takes "then commit" back
    assert typed.queued == ["run the tests"] and typed.text == "then commit"
    typed.feed(b"\x15", False)  # cancelled
    assert typed.take_queued() == ["run the tests"] and typed.take_queued() == [] and typed.take() == ""


@pytest.fixture
def pty_pair():
    master, slave = os.openpty()
    yield master, slave
    os.close(master)
    os.close(slave)


def lflags(fd: int) -> int:
    return termios.tcgetattr(fd)[3]


def watcher_on(slave: int) -> tuple[KeyWatcher, threading.Event]:
    pressed = threading.Event()
    return KeyWatcher(slave, on_escape=pressed.set, esc_timeout=0.1), pressed


def test_a_turn_turns_echo_off_keeps_signals_and_tells_esc_from_an_arrow(pty_pair):
    master, slave = pty_pair
    before = termios.tcgetattr(slave)
    watcher, pressed = watcher_on(slave)
    with watcher.turn():
        flags = lflags(slave)
        assert not flags & termios.ECHO and not flags & termios.ICANON and flags & termios.ISIG
        os.write(master, b"\x1b[Ahi")
        assert not pressed.wait(0.5)  # an arrow key is no Esc
        os.write(master, b"\x1b")
        assert pressed.wait(10)
    assert termios.tcgetattr(slave) == before
    assert watcher.take_typed() == "hi"


def test_the_terminal_comes_back_after_an_error_and_after_sigterm(pty_pair):
    master, slave = pty_pair
    before = termios.tcgetattr(slave)
    watcher, _ = watcher_on(slave)
    with pytest.raises(ValueError):
        with watcher.turn():
            raise ValueError("boom")
    assert termios.tcgetattr(slave) == before and watcher.thread is None
    with signals_as_interrupts(), pytest.raises(Terminated):
        with watcher.turn():
            assert lflags(slave) != before[3]
            os.kill(os.getpid(), signal.SIGTERM)
            threading.Event().wait(10)  # the signal's exception ends this wait
    assert termios.tcgetattr(slave) == before and watcher.thread is None


def test_a_question_mid_turn_gets_the_terminal_as_it_was(pty_pair):
    master, slave = pty_pair
    before = termios.tcgetattr(slave)
    watcher, pressed = watcher_on(slave)
    with watcher.turn():
        with watcher.paused():
            assert termios.tcgetattr(slave) == before
            os.write(master, b"\x1b\n")  # Esc at the question is the question's (it cancels the run there)
            assert not pressed.wait(0.3)
            assert os.read(slave, 10) == b"\x1b\n"  # left for the question to read
        assert not lflags(slave) & termios.ECHO
        os.write(master, b"later")
        threading.Event().wait(0.3)
    assert termios.tcgetattr(slave) == before
    assert watcher.take_typed() == "later"
    with watcher.turn():
        os.write(master, b"early")
        threading.Event().wait(0.3)
        with watcher.paused(discard=True):  # an approval: what was typed before it is dropped
            pass
    assert watcher.take_typed() == ""


ESC_INTERRUPTS = """
import os, signal, threading, time
from clovercode.ui.keys import KeyWatcher, interrupt_main_thread
# what the process inherited, said if the interrupt does not come (3 of 4 whole runs on 5 December missed it)
inherited = (sorted(signal.pthread_sigmask(signal.SIG_BLOCK, ())), signal.getsignal(signal.SIGINT))
# an ignored SIGINT is inherited through exec, and so is a blocked one: Python's handler, SIGINT unblocked
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
fired = []
def on_escape():
    fired.append(time.monotonic() - began)
    interrupt_main_thread()  # the real action: SIGINT to the main thread
master, slave = os.openpty()
watcher = KeyWatcher(slave, on_escape=on_escape, esc_timeout=0.05)
began = time.monotonic()
try:
    with watcher.turn():
        os.write(master, b"\\x1b")
        threading.Event().wait(10)  # a blocking wait, as a read from the model is
    print(f"no interrupt: fired {fired}, inherited mask and handler {inherited}")
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - began:.2f} s")
"""


def test_esc_interrupts_the_main_thread_as_ctrl_c_does():
    # In a process of its own, with Python's SIGINT handler: a suite worker's SIGINT was found ignored in
    # 3 of 4 whole runs on 5 December (never alone), and an ignored signal is inherited by a child too
    done = subprocess.run([sys.executable, "-c", ESC_INTERRUPTS], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("interrupted after"), (done.stdout, done.stderr)
    assert float(done.stdout.split()[2]) < 9, done.stdout  # by the Esc, not the end of the wait

"""A signal is never lost (issue 46): the handler's interrupt can land inside a ``__del__`` or a
weakref callback, where Python discards it ("Exception ignored in ..."). The signal stays recorded
until code of ours has caught its interrupt, so the next check point (between steps, at every model
event, while a command runs) raises it again, and a later signal acts instead of being absorbed."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import sys
import threading
import time
import weakref

import pytest
from rich.console import Console

from clovercode.ground.config import load_config
from clovercode.ground.termination import ENDING, Terminated, signals_as_interrupts
from conftest import tool_call_text


class SignalInDel:
    """Sends SIGTERM to this process from its ``__del__`` and goes on working there, so the handler
    runs (and raises) inside the ``__del__``, as it did inside importlib's weakref callback."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        total = 0
        for i in range(10000):  # the handler runs at one of these bytecodes
            total += i


class Talker:
    """A model fake at the seam: one turn of many tokens, a SIGTERM lost in a ``__del__`` among them,
    then a finish call."""

    name = "talker"

    def generate(self, messages, tools, params):
        from clovercode.backends.base import Finish, TextDelta, Usage

        for index in range(50):
            if index == 10:
                SignalInDel()  # dropped at once: its __del__ runs here, in the main thread
            yield TextDelta("word ")
        yield TextDelta(tool_call_text("finish", summary="all done"))
        yield Usage(prompt_tokens=10, completion_tokens=60)
        yield Finish("stop")

    def close(self):
        pass


def test_a_sigterm_raised_inside_a_del_still_stops_the_run(tmp_path, monkeypatch):
    from clovercode.front import execcmd

    root = tmp_path / "proj"
    root.mkdir()
    real = execcmd.open_session
    monkeypatch.setattr(execcmd, "open_session", lambda *a, **k: real(*a, **{**k, "backend": Talker()}))
    cfg = load_config(root, flags={"model": "replay:unused", "sandbox": "none", "approval": "full-auto"})
    out = io.StringIO()
    with signals_as_interrupts():
        code = execcmd.run_exec(root, cfg, "go", True, out, Console(file=io.StringIO()))
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    done = events[-1]
    assert done["type"] == "run_completed" and done["stop_reason"] == "interrupted", done
    assert code == 143 and done["exit_code"] == 143


def test_a_second_signal_acts_when_the_first_ones_interrupt_was_lost():
    with signals_as_interrupts():
        SignalInDel()  # the first SIGTERM: its Terminated is discarded inside the __del__
        assert ENDING.signum == signal.SIGTERM
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)  # absorbed before: the run never stopped
            time.sleep(0.2)
    assert ENDING.signum == signal.SIGTERM


def test_a_second_signal_is_absorbed_once_the_first_is_acted_on():
    """Clean-up after the first signal is not cut short by a second one."""
    with signals_as_interrupts():
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
        ENDING.deliver()
        os.kill(os.getpid(), signal.SIGTERM)
        ENDING.check()  # nothing to raise: the stop is being acted on


class Churn:
    """Work that runs Python code in ``__del__`` and weakref callbacks, where a raise is discarded."""

    def __del__(self) -> None:
        sum(range(200))


def _finalized() -> None:
    sum(range(200))


def test_500_signals_at_random_moments_are_none_of_them_lost():
    """A cheap loop with the loop's check point between its steps, its steps running ``__del__``s and
    weakref callbacks most of the time; a SIGTERM at a random moment of each of 500 runs must end
    every run, whether its interrupt landed in a step or in a callback."""
    rng = random.Random(46)
    lost: list[int] = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # the sender thread gets the interpreter soon after its timer ends
    try:
        in_callbacks = _runs(rng, lost)
    finally:
        sys.setswitchinterval(switch)
    assert not lost, f"{len(lost)} of 500 signals lost (runs {lost[:10]})"
    assert in_callbacks, "no signal landed in a callback: the loop does not exercise the lost case"


def _runs(rng: random.Random, lost: list[int]) -> int:
    """500 runs of the loop, each sent a SIGTERM at a random moment; the runs that went on are ``lost``.
    Returns how many signals were raised inside a callback (and so discarded by Python)."""
    in_callbacks = 0
    for trial in range(500):
        ENDING.__init__()
        sent = threading.Event()

        def send() -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            sent.set()
        timer = threading.Timer(rng.uniform(0.0, 0.001), send)
        with signals_as_interrupts():
            try:
                timer.start()
                after = 0
                while after < 5:  # steps after the signal was sent: a loop that went on
                    in_callbacks += ENDING.lost is not None  # its raise was discarded in a callback
                    ENDING.check()
                    for _ in range(3):
                        Churn()
                        weakref.finalize(Churn(), _finalized)
                    if sent.is_set():
                        after += 1
                lost.append(trial)
            except Terminated:
                pass
            finally:
                timer.join()
    return in_callbacks


def test_a_signal_python_wrapped_while_typer_parses_still_ends_as_that_signal(monkeypatch, capsys):
    # The sweep caught it: SIGTERM landed while typer imported a module of dataclasses, and Python 3.11
    # wraps what a __set_name__ raises in a RuntimeError; it ended in a traceback, not exit 143
    from clovercode.front import cli
    from clovercode.ground.termination import interrupt_behind as wrapped_interrupt
    from clovercode.ground.termination import Terminated

    class Lands:
        def __set_name__(self, owner, name):
            raise Terminated(signal.SIGTERM)

    def parse(*args, **kwargs):
        type("WithADataclassField", (), {"field": Lands()})

    try:
        parse()
    except BaseException as exc:  # noqa: BLE001 - whatever this Python makes of it
        assert isinstance(wrapped_interrupt(exc), Terminated)
    monkeypatch.setattr(cli, "app", parse)
    monkeypatch.setattr(sys, "argv", ["clovercode", "exec", "--json", "x"])
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 143
    assert wrapped_interrupt(RuntimeError("a bug")) is None

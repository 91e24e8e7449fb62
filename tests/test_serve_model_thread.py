"""`clovercode serve` drives the model on the thread that loaded it.

On CPU, torch's OpenMP intra-op pool belongs to the thread that first ran an op; a second thread gets
a second pool, and with more pool threads than cores libgomp stops spinning between ops: every
decoding step of a small model took about twice as long when the scheduler ran in a thread of its
own (docs/endpoint.md, "One model thread"). These tests run the real `run_serve` on the test's main
thread, with a backend that records which thread built it and which threads generated, and end it
with a real SIGTERM as a supervisor would.
"""

from __future__ import annotations

import gc
import http.client
import json
import os
import signal
import threading
import urllib.request
from typing import Any, Iterator, Sequence

import pytest
from rich.console import Console
from serve_helpers import EchoBackend, EchoBatchBackend, EchoBatchSession

from clovercode.backends.base import Event, GenerationParams
from clovercode.ground.config import load_config
from clovercode.ground.messages import Message
from clovercode.front import servecmd as command
from clovercode.front.servecmd import READY_PREFIX
from clovercode.toolcalls.schemas import ToolSpec


class Recorder:
    """Where the backend was built and where the model ran."""

    def __init__(self) -> None:
        self.loaded_on = threading.get_ident()
        self.ran_on: set[int] = set()
        self.frozen: set[int] = set()  # objects the collector skipped (gc.freeze) while the model ran

    def ran(self) -> None:
        self.ran_on.add(threading.get_ident())
        self.frozen.add(gc.get_freeze_count())


class SerialRecording(EchoBackend, Recorder):
    def __init__(self) -> None:
        EchoBackend.__init__(self)
        Recorder.__init__(self)

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        self.ran()
        yield from super().generate(messages, tools, params)


class RecordingSession(EchoBatchSession):
    def step(self) -> list[tuple[str, Event]]:
        self.backend.ran()  # type: ignore[attr-defined]
        return super().step()


class BatchRecording(EchoBatchBackend, Recorder):
    def __init__(self) -> None:
        EchoBatchBackend.__init__(self)
        Recorder.__init__(self)

    def open_batch(self, max_batch: int) -> EchoBatchSession:
        return RecordingSession(self, max_batch)


def _ask_then_terminate(ready: threading.Event, url: list[str], answers: list[Any]) -> None:
    """A client: wait for the ready line, ask twice, then SIGTERM this process (whatever happened)."""
    try:
        if not ready.wait(30):
            return
        for text in ("first", "second"):
            body = json.dumps({"model": "echo", "messages": [{"role": "user", "content": text}]}).encode()
            request = urllib.request.Request(url[0] + "/chat/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                answers.append(json.loads(response.read())["choices"][0]["message"]["content"])
    except Exception as exc:  # the assertions below report it
        answers.append(exc)
    finally:
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("backend_type,max_batch", [(SerialRecording, 1), (BatchRecording, 4)])
def test_serve_runs_the_model_on_the_thread_that_loaded_it(tmp_path, monkeypatch, backend_type, max_batch):
    assert threading.current_thread() is threading.main_thread()  # signal handlers need it
    backends: list[Recorder] = []

    def open_backend(cfg: Any) -> Recorder:
        backends.append(backend_type())
        return backends[-1]

    monkeypatch.setattr(command, "open_backend", open_backend)
    cfg = load_config(tmp_path, {}, {"model": "echo", "serve.port": 0, "serve.max_batch": max_batch})
    ready, url, answers = threading.Event(), [], []

    def print_line(line: str) -> None:
        url.append(line[len(READY_PREFIX):].split()[0])
        ready.set()

    client = threading.Thread(target=_ask_then_terminate, args=(ready, url, answers), daemon=True)
    client.start()
    before = signal.getsignal(signal.SIGTERM)
    assert command.run_serve(cfg, Console(file=open(os.devnull, "w")), print_line=print_line) == 0
    client.join(10)
    assert answers == ["echo: first", "echo: second"]
    [backend] = backends
    assert backend.ran_on == {backend.loaded_on} == {threading.get_ident()}
    assert signal.getsignal(signal.SIGTERM) is before  # the handler run_serve installed is gone again
    # the heap as loaded (model, tokenizer, modules) is frozen while serving: the collector's oldest
    # generation no longer walks it between steps (a 30-120 ms pause with clover-tiny loaded); after
    # serving, what run_serve froze is the collector's again
    assert min(backend.frozen) > 0
    assert gc.get_freeze_count() == 0


def _hold_a_connection_then_terminate(ready: threading.Event, url: list[str], held: list[Any]) -> None:
    """A keep-alive client: one request, the connection kept open and idle, then SIGTERM."""
    try:
        if ready.wait(30):
            host, port = url[0].split("//")[1].split("/")[0].split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.request("GET", "/health")
            response = conn.getresponse()
            response.read()
            held.append((conn, response.will_close))
    finally:
        os.kill(os.getpid(), signal.SIGTERM)


def test_serve_ends_idle_connections_and_their_threads_before_it_returns(tmp_path, monkeypatch):
    """A handler thread that outlived run_serve held the app and its model into interpreter exit,
    where freeing the model on that thread aborted the process (ServeHTTPServer.server_close)."""
    monkeypatch.setattr(command, "open_backend", lambda cfg: EchoBackend())
    cfg = load_config(tmp_path, {}, {"model": "echo", "serve.port": 0})
    ready, url, held = threading.Event(), [], []

    def print_line(line: str) -> None:
        url.append(line[len(READY_PREFIX):].split()[0])
        ready.set()

    before = {t for t in threading.enumerate() if "process_request_thread" in t.name}
    client = threading.Thread(target=_hold_a_connection_then_terminate, args=(ready, url, held), daemon=True)
    client.start()
    assert command.run_serve(cfg, Console(file=open(os.devnull, "w")), print_line=print_line) == 0
    client.join(10)
    [(conn, will_close)] = held
    assert not will_close  # the connection was open and idle when serving stopped
    assert not {t for t in threading.enumerate() if "process_request_thread" in t.name} - before
    conn.sock.settimeout(10)
    assert conn.sock.recv(1) == b""  # the server closed it
    conn.close()

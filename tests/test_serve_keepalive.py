"""Something on the wire while the model works (issue 48.3): a streamed request gets its first event
at once (the role chunk on chat, ``response.created`` / ``response.in_progress`` on Responses), then an
SSE comment every ``keepalive_s`` while the model is still prefilling, and a server told to stop
during a prefill ends the stream within seconds with an error, not when the prefill ends. A backend
whose "prefill" is a sleep, behind a real server on 127.0.0.1, read off a raw socket."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Iterator, Sequence

import pytest
from serve_helpers import running_server

from clovercode.backends.base import Event, Finish, GenerationParams, TextDelta, Usage
from clovercode.backends.scheduler import Failed, Job, Scheduler, ServerStopping
from clovercode.ground.messages import Message
from clovercode.toolcalls.schemas import ToolSpec


class PrefillBackend:
    """Says nothing for ``prefill`` seconds (a long prompt on a CPU host), then a short reply."""

    name = "prefill"
    context_window = 4096

    def __init__(self, prefill: float):
        self.prefill = prefill
        self.scheduler: Scheduler | None = None
        self.interrupt_at: float | None = None  # emulate SIGTERM arriving on the model thread then
        self.release = threading.Event()  # the test is done: the "prefill" ends (the worker can stop)

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        started = time.monotonic()
        while time.monotonic() - started < self.prefill and not self.release.is_set():  # a forward looks at no stop flag
            time.sleep(0.02)
            if self.interrupt_at is not None and time.monotonic() - started >= self.interrupt_at:
                self.interrupt_at = None
                self.scheduler.interrupt()  # what serve's signal handler runs, on this thread
        yield TextDelta("done")
        yield Usage(1, 1)
        yield Finish("stop")

    def close(self) -> None:
        pass


def stream(port: int, path: str, body: dict, seconds: float) -> list[tuple[float, bytes]]:
    """(when, bytes) as they arrive on a raw socket, for up to ``seconds`` or until the server is done."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=seconds)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    started, got = time.monotonic(), []
    try:
        while time.monotonic() - started < seconds:
            piece = sock.recv(65536)
            if not piece:
                break
            got.append((time.monotonic() - started, piece))
            if b"".join(p for _, p in got[-2:]).endswith(b"\r\n0\r\n\r\n"):  # the last chunk of the stream
                break
    except socket.timeout:
        pass
    finally:
        sock.close()
    return got


def first_at(got: list[tuple[float, bytes]], needle: bytes) -> float:
    seen = b""
    for when, piece in got:
        seen += piece
        if needle in seen:
            return when
    raise AssertionError(f"{needle!r} never came: {seen[:300]!r}")


CHAT = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
RESPONSES = {"input": "hi", "stream": True}


@pytest.mark.parametrize("path,body,first", [("/v1/chat/completions", CHAT, b'"role": "assistant"'),
                                             ("/v1/responses", RESPONSES, b"response.in_progress")])
def test_a_stream_opens_at_once_and_keeps_alive_through_the_prefill(path, body, first):
    with running_server(PrefillBackend(1.2)) as app:
        app.keepalive_s = 0.2
        got = stream(app.port, path, body, 10)
    whole = b"".join(piece for _, piece in got)
    assert first_at(got, first) < 0.9, "the first event waited for the prefill"
    assert whole.count(b": keep-alive") >= 3, whole[:400]
    assert first_at(got, b"done") >= 1.2 and whole.index(b": keep-alive") < whole.index(b"done")


def test_stopping_during_a_prefill_ends_the_stream_with_an_error_within_seconds():
    backend = PrefillBackend(30)
    with running_server(backend) as app:
        result: list = []
        reader = threading.Thread(target=lambda: result.append(stream(app.port, "/v1/responses", RESPONSES, 20)))
        reader.start()
        time.sleep(0.8)
        asked = time.monotonic()
        app.scheduler.request_stop()
        reader.join(10)
        ended = time.monotonic() - asked
        backend.release.set()
    whole = b"".join(piece for _, piece in result[0])
    assert ended < 5, f"the stream ended {ended:.1f} s after the stop"
    assert b"response.failed" in whole and b"shutting down" in whole


def test_interrupt_on_the_model_thread_leaves_the_prefill_at_once():
    """serve's SIGTERM handler runs on the model thread, inside the prefill: it raises out of it."""
    backend = PrefillBackend(30)
    backend.interrupt_at = 0.2
    scheduler = Scheduler(backend, max_batch=1)
    backend.scheduler = scheduler
    job = Job("j1", [Message("user", "hi")], [], GenerationParams(), "c")
    scheduler.submit(job)
    started = time.monotonic()
    scheduler.start()
    scheduler._thread.join(5)
    assert not scheduler._thread.is_alive() and time.monotonic() - started < 5
    item = job.events.get(timeout=1)
    assert isinstance(item, Failed) and isinstance(item.error, ServerStopping)

"""Test backends at the model seam, an in-process `clovercode serve` on 127.0.0.1, and a real
`clovercode serve` subprocess (`serve(...)`) with the official `openai` client (`client(url)`).

The backends answer by echoing the last user message, so a reply that went to the wrong client
shows at once. Words in that message steer them: HUGE → ContextTooLong before any output,
BREAK → a failure mid-reply, CALL:name → a tool call in Qwen3-Coder XML, SLOW → a pause per chunk.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import openai
from conftest import cli_env

from clovercode.ground.messages import Message
from clovercode.backends.base import ContextTooLong, Event, Finish, GenerationParams, ModelError, TextDelta, Usage
from clovercode.front.servecmd import READY_PREFIX
from clovercode.serve.protocol import Limits
from clovercode.backends.scheduler import Scheduler
from clovercode.serve.connections import ConnectionCaps
from clovercode.serve.server import ServeApp, make_server
from clovercode.toolcalls.schemas import ToolSpec


def reply_for(messages: Sequence[Message]) -> str:
    last = next(m.content for m in reversed(messages) if m.role == "user")
    if "CALL:" in last:
        name = last.split("CALL:", 1)[1].split()[0]
        return (f"<think>\ncalling {name}\n</think>\n\nSure.\n<tool_call>\n<function={name}>\n<parameter=path>\n"
                f"a.py\n</parameter>\n<parameter=start_line>\n2\n</parameter>\n</function>\n</tool_call>")
    return f"echo: {last}"


class EchoBackend:
    """One request at a time, in chunks of 3 characters; records what happened to each stream."""

    name = "echo"
    context_window = 4096

    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.started = 0
        self.closed_early = 0
        self.lock = threading.Lock()

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        text = reply_for(messages)
        if "HUGE" in text:
            raise ContextTooLong("the prompt is 9999 tokens; this model's context window is 4096 tokens",
                                 prompt_tokens=9999, window=4096)
        with self.lock:
            self.started += 1
        finished = False
        try:
            for start in range(0, len(text), 3):
                if "BREAK" in text and start >= 6:
                    raise ModelError("the GPU fell over")
                if self.delay or "SLOW" in text:
                    time.sleep(self.delay or 0.05)
                yield TextDelta(text[start:start + 3])
            yield Usage(prompt_tokens=sum(len(m.content) for m in messages), completion_tokens=len(text))
            finished = True
            yield Finish("stop")
        finally:
            if not finished:
                with self.lock:
                    self.closed_early += 1

    def close(self) -> None:
        pass


class EchoBatchSession:
    """Continuous batching over echo replies: each step writes one character of every active reply."""

    def __init__(self, backend: "EchoBatchBackend", max_batch: int):
        self.backend, self.max_batch = backend, max_batch
        self.rows: dict[str, list[Any]] = {}

    def add(self, key: str, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> None:
        text = reply_for(messages)
        if "HUGE" in text:
            raise ContextTooLong("the prompt is 9999 tokens; this model's context window is 4096 tokens",
                                 prompt_tokens=9999, window=4096)
        assert len(self.rows) < self.max_batch, "admitted beyond max_batch"
        self.rows[key] = [text, 0]

    def step(self) -> list[tuple[str, Event]]:
        self.backend.widths.append(len(self.rows))
        if any("CRASH" in text for text, _ in self.rows.values()):
            raise RuntimeError("batch kernel crashed")
        time.sleep(self.backend.delay)
        events: list[tuple[str, Event]] = []
        for key, row in list(self.rows.items()):
            text, done = row
            events.append((key, TextDelta(text[done])))
            row[1] += 1
            if row[1] == len(text):
                del self.rows[key]
                events += [(key, Usage(1, len(text))), (key, Finish("stop"))]
        return events

    def remove(self, key: str) -> None:
        if self.rows.pop(key, None) is not None:
            self.backend.removed.append(key)

    def close(self) -> None:
        self.backend.sessions_closed += 1


class EchoBatchBackend(EchoBackend):
    def __init__(self, delay: float = 0.002):
        super().__init__()
        self.delay = delay
        self.widths: list[int] = []
        self.removed: list[str] = []
        self.sessions_closed = 0
        self.joined: list[list[str]] = []  # the keys of each add_many call (EchoJointBatchBackend)

    def open_batch(self, max_batch: int) -> EchoBatchSession:
        return EchoBatchSession(self, max_batch)


class EchoJointBatchSession(EchoBatchSession):
    """A session with the optional ``add_many``: requests that arrive together join in one call."""

    def add_many(self, requests: Sequence[tuple[str, Sequence[Message], Sequence[ToolSpec], GenerationParams]]
                 ) -> dict[str, Exception]:
        self.backend.joined.append([key for key, *_ in requests])
        failures: dict[str, Exception] = {}
        for key, messages, tools, params in requests:
            try:
                self.add(key, messages, tools, params)
            except ContextTooLong as exc:
                failures[key] = exc
        return failures


class EchoJointBatchBackend(EchoBatchBackend):
    def open_batch(self, max_batch: int) -> EchoJointBatchSession:
        return EchoJointBatchSession(self, max_batch)


@contextmanager
def running_server(backend: Any, *, max_batch: int = 8, max_queue: int = 16, api_key: str = "",
                   max_request_bytes: int = 1 << 20, max_new_tokens: int = 512,
                   max_connections: int = 64, api_keys: dict[str, str] | None = None,
                   header_timeout: float = 5.0, per_address: int = 0, per_tenant: int = 0,
                   body_timeout: float = 30.0) -> Iterator[ServeApp]:
    """``api_keys`` (key → tenant): with two or more, each holds an even share of the queue, as in
    `clovercode serve` (front/servecmd.py: queue_share)."""
    share = max(1, max_queue // len(api_keys)) if api_keys and len(api_keys) > 1 else 0
    scheduler = Scheduler(backend, max_batch=max_batch, max_queue=max_queue, max_queue_per_client=share)
    app = ServeApp(scheduler, "test-model", Limits(max_new_tokens, True), api_key, max_request_bytes,
                   getattr(backend, "context_window", None), api_keys=dict(api_keys or {}))
    server = make_server(app, "127.0.0.1", 0, ConnectionCaps(max_connections, per_address, per_tenant,
                                                             header_timeout, body_timeout))
    app.port = server.server_address[1]  # type: ignore[attr-defined]
    scheduler.start()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield app
    finally:
        server.shutdown()
        scheduler.stop()
        server.server_close()


def wait_for(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


@contextmanager
def serve(*args: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start `clovercode serve --port 0 ARGS`; yield its base URL; stop it with SIGTERM (exit 0)."""
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "serve", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or cli_env())
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(60)
    try:
        assert lines and lines[0].startswith(READY_PREFIX), (lines, proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
        yield lines[0][len(READY_PREFIX):].split()[0], proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        assert code == 0, proc.stderr.read()


def client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=60)

"""An ACP client with no SDK: NDJSON lines to a real `clovercode acp`, every message both ways kept
for tests/acp_helpers.SchemaChecker, and raw bytes (the attacks) sent unchecked."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from acp_helpers import SchemaChecker
from conftest import cli_env

Answer = Callable[[dict[str, Any]], dict[str, Any]]


class RawClient:
    def __init__(self, cwd: Path, replay: Path, log: Path, *flags: str, answer: Answer | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "clovercode", "acp", "--model", f"replay:{replay}", *flags],
                                     cwd=cwd, env=cli_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log.open("ab"))
        self.checker = SchemaChecker()
        self.received: list[dict[str, Any]] = []  # every message from the agent, in order
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.answer = answer or (lambda request: {})  # the client's side of agent requests
        self.next_id = 100
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)  # the agent's stdout must be JSON-RPC only: a stray line fails here
            self.received.append(message)
            self.checker.messages.append(("agent", message))
            self.inbox.put(message)
        self.inbox.put(None)

    def send(self, message: dict[str, Any]) -> None:
        self.checker.messages.append(("client", message))
        self._write(json.dumps(message).encode() + b"\n")

    def send_raw(self, data: bytes, answered_as: Any = None) -> None:
        """A line that is no valid message: not checked; the agent's error answer has id ``answered_as``."""
        self.checker.raw_ids.append(answered_as)
        self._write(data if data.endswith(b"\n") else data + b"\n")

    def _write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def start(self, method: str, params: Any, bad: bool = False) -> int:
        """Send a request; a ``bad`` one (the schema refuses it: an attack) is not checked."""
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        if bad:
            self.send_raw(json.dumps(message).encode(), answered_as=self.next_id)
        else:
            self.send(message)
        return self.next_id

    def request(self, method: str, params: Any, timeout: float = 60, bad: bool = False) -> dict[str, Any]:
        """Send a request and wait for its answer (the whole message: ``result`` or ``error``)."""
        ident = self.start(method, params, bad)
        return self.wait(lambda m: "method" not in m and m.get("id") == ident, timeout)

    def wait(self, done: Callable[[dict[str, Any]], bool], timeout: float = 60) -> dict[str, Any]:
        """Read until a message satisfies ``done``, answering the agent's requests on the way."""
        end = time.monotonic() + timeout
        while True:
            message = self.inbox.get(timeout=max(0.01, end - time.monotonic()))
            if message is None:
                raise AssertionError(f"the agent exited (code {self.proc.wait()})")
            if "method" in message and "id" in message:
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": self.answer(message)})
            if done(message):
                return message

    def answer_to(self, ident: int, timeout: float = 60) -> dict[str, Any]:
        """The answer to request ``ident``, also when an earlier wait read past it."""
        found = [m for m in list(self.received) if "method" not in m and m.get("id") == ident]
        return found[0] if found else self.wait(lambda m: "method" not in m and m.get("id") == ident, timeout)

    def updates(self, session: str | None = None) -> list[dict[str, Any]]:
        return [m["params"]["update"] for m in self.received if m.get("method") == "session/update"
                and (session is None or m["params"]["sessionId"] == session)]

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)

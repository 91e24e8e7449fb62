"""An editor's cancel reaches a turn that waits on an endpoint (a server that has taken the request and
sent nothing yet: a long prefill). The turn runs on its own thread, where the cancel's interrupt lands
only when Python code runs again; blocked in the read, it never would. The cancel must shut the call's
connection, and the prompt be answered `cancelled` at once. Real `clovercode acp`, a real HTTP server."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time

import pytest

from conftest import cli_env
from openai_stub import StubServer
from test_subagent_endpoint_stop import hang

pytestmark = pytest.mark.slow


def test_session_cancel_cuts_a_turn_blocked_in_an_endpoint_read(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    taken, closed = threading.Event(), threading.Event()
    with StubServer(["clover"]) as stub:
        stub.script = [hang(taken, closed)]
        proc = subprocess.Popen([sys.executable, "-m", "clovercode", "acp", "--endpoint", stub.url], cwd=project,
                                env=cli_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        inbox: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [inbox.put(json.loads(line)) for line in proc.stdout], daemon=True).start()

        def send(message: dict) -> None:
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
            proc.stdin.flush()

        def answer(ident: int, timeout: float) -> dict:
            end = time.monotonic() + timeout
            while True:
                message = inbox.get(timeout=max(end - time.monotonic(), 0.01))
                if message.get("id") == ident and "method" not in message:
                    return message

        try:
            send({"id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}})
            answer(1, 30)
            send({"id": 2, "method": "session/new", "params": {"cwd": str(project), "mcpServers": []}})
            sid = answer(2, 60)["result"]["sessionId"]
            send({"id": 3, "method": "session/prompt",
                  "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}})
            assert taken.wait(60), "the model request never came"
            sent = time.monotonic()
            send({"method": "session/cancel", "params": {"sessionId": sid}})
            result = answer(3, 30)
            after = time.monotonic() - sent
            assert result["result"]["stopReason"] == "cancelled", result
            assert after < 2.0, f"{after:.2f} s"  # before: the answer waited for the server (here: forever)
            assert closed.wait(5), "the turn's connection stayed open after the cancel"
        finally:
            proc.stdin.close()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
            err = proc.stderr.read().decode(errors="replace")
        assert "Traceback" not in err, err[-2000:]

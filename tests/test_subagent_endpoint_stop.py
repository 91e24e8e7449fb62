"""A stop reaches a child that waits on an endpoint (issue 46's "stop requests reach children"): the
child's model call is a request the server has taken and not yet answered (a long prefill), so no
event comes for the child to read its stop at. SIGTERM to `exec --json` must still end the child
as stopped by its parent — its connection closed, so the server stops working for nobody — rather
than leave it behind blocked in a read. Real subprocess, a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import cli_env, default_sigint, make_git_repo
from conftest import tool_call_text as call
from openai_stub import StubServer, chunk, sse

pytestmark = pytest.mark.slow


def hang(taken: threading.Event, closed: threading.Event):
    """Take the request and answer nothing until the client goes away (a read then returns no bytes)."""
    def reply(handler) -> None:
        taken.set()
        handler.connection.settimeout(60)
        try:
            while handler.connection.recv(1024):
                pass
        except OSError:
            pass
        closed.set()
    return reply


def test_sigterm_reaches_a_child_blocked_in_an_endpoint_read(tmp_path):
    work = make_git_repo(tmp_path / "p")
    taken, closed = threading.Event(), threading.Event()
    with StubServer(["clover"]) as stub:
        stub.script = [sse([chunk({"role": "assistant", "content": call("task", description="wait", prompt="wait")}),
                            chunk({}, "stop")]),
                       hang(taken, closed)]
        proc = subprocess.Popen([sys.executable, "-m", "clovercode", "exec", "--json", "--endpoint", stub.url,
                                 "--sandbox", "none", "wait for it"], cwd=work, env=cli_env(), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=default_sigint)
        try:
            assert taken.wait(60), proc.stderr.read() if proc.poll() is not None else "no child request"
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
            after = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
        assert closed.wait(5), "the child's connection stayed open after the stop"
    events = [json.loads(line) for line in out.splitlines()]
    child = next(e for e in events if e["type"] == "subagent_completed")
    assert "Traceback" not in err, err[-2000:]
    assert "left behind" not in child["detail"] and "stopped by its parent" in child["detail"], child
    assert child["stop_reason"] == "cancelled" and proc.returncode == 143, (proc.returncode, err[-1000:])
    assert after < 2.0, f"{after:.2f} s"  # the parent's wait for its children is 2 s: ended well within it

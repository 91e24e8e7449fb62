"""Shared by the MCP and hook tests: config files, the test MCP server, sessions on replay files."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from clovercode.agent.events import RecordingSink
from clovercode.ground.config import load_config, user_config_path
from clovercode.wiring.session import open_session

SERVER = Path(__file__).resolve().parent / "mcp_test_server.py"


def server_command(kind: str) -> str:
    """A TOML inline table body for a stdio test server of this kind."""
    return f'command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(SERVER))}, "{kind}"]'


def write_user_config(text: str) -> Path:
    path = user_config_path(os.environ)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def replay(tmp_path: Path, turns: list[str]) -> Path:
    path = tmp_path / "replay.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns), encoding="utf-8")
    return path


def run_session(root: Path, tmp_path: Path, turns: list[str], *, interactive: bool = False, approve=None, **flags):
    """Open a session on a replay of ``turns``, run one task, close; (result, sink, session)."""
    cfg = load_config(root, os.environ, {"model": f"replay:{replay(tmp_path, turns)}", **flags})
    kwargs = {"approve": approve} if approve is not None else {}
    session = open_session(root, cfg, interactive=interactive, **kwargs)
    sink = RecordingSink()
    try:
        result = session.run_task("do the task", sink)
    finally:
        session.close()
    return result, sink, session


def observations(sink: RecordingSink) -> list[dict]:
    return [data for kind, data in sink.events if kind == "observation"]


def warnings(sink: RecordingSink) -> list[str]:
    return [data["text"] for kind, data in sink.events if kind == "warning"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http_server(kind: str, tmp_path: Path, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(tmp_path / "http-server.log", "w")
    proc = subprocess.Popen([sys.executable, str(SERVER), kind, str(port)], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the test MCP server did not start: {(tmp_path / 'http-server.log').read_text()}")


def wait_for_servers(child, prompt: str = "clover>", **states: str) -> None:
    """In a REPL (pexpect), ask /mcp until each named server is in its state ("running", "failed"):
    servers start in the background, and a test whose first task calls a tool must wait for it."""
    import re

    for _ in range(600):
        child.sendline("/mcp")
        child.expect_exact("/mcp shows the servers")  # the usage line ends the listing
        plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", child.before)
        child.expect_exact(prompt)
        if all(re.search(rf"(?m)^{re.escape(name)}\s+{state}\b", plain) for name, state in states.items()):
            return
        time.sleep(0.2)
    raise AssertionError(f"the MCP servers never reached {states}")

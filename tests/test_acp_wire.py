"""`clovercode acp` against a client with no SDK (tests/acp_raw.py): what crosses the wire, line by line.
Every message both ways is checked against the published schema; the attacks (lines that are no
JSON-RPC message) are sent raw and must each get the error JSON-RPC names, with the agent alive."""

from __future__ import annotations

import time
from pathlib import Path

from acp_raw import RawClient
from conftest import tool_call_text, write_replay
from test_acp import SLEEP, sleeping

CAPS = {"fs": {"readTextFile": False, "writeTextFile": False}}


def init(client: RawClient, version: object = 1) -> dict:
    bad = not isinstance(version, int) or version < 0
    return client.request("initialize", {"protocolVersion": version, "clientCapabilities": CAPS}, bad=bad)


def error_of(message: dict) -> tuple[int, str]:
    assert "error" in message, message
    return message["error"]["code"], message["error"]["message"]


def test_bad_lines_are_answered_and_the_agent_and_its_turn_go_on(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    replay = write_replay(
        tmp_path / "r.jsonl",
        tool_call_text("run_command", command="echo started > started.txt; sleep 1.5; echo late > late.txt"),
        "The first command ran.",
        tool_call_text("run_command", command=f"echo going > going.txt; sleep {SLEEP}"),
        "never reached")
    client = RawClient(project, replay, tmp_path / "log", "--approval", "full-auto")
    try:
        # before initialize: refused, as is anything not a request
        assert error_of(client.request("session/new", {"cwd": str(project), "mcpServers": []}))[0] == -32600
        assert error_of(init(client, "1"))[0] == -32602  # a string is no protocol version
        assert error_of(init(client, -1))[0] == -32602
        assert init(client, 0)["result"]["protocolVersion"] == 1  # 0 is not supported: the latest is offered
        caps = init(client)["result"]["agentCapabilities"]
        assert caps["sessionCapabilities"] == {"list": {}, "resume": {}, "close": {}, "delete": {}}

        assert error_of(client.request("session/new", {"cwd": "/", "mcpServers": []})) == (
            -32602, "/ is the root of the filesystem, not a project. Open a project folder in the editor; "
                    "clovercode works inside the folder it is given.")
        sid = client.request("session/new", {"cwd": str(project), "mcpServers": []})["result"]["sessionId"]

        prompt = client.start("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "first"}]})
        for _ in range(300):  # the command is running
            if (project / "started.txt").exists():
                break
            time.sleep(0.02)
        attacks = [(b"[]", None, -32600), (b"42", None, -32600), (b'"hello"', None, -32600), (b"null", None, -32600),
                   (b"{not json", None, -32700), (b'\xff\xfe{"jsonrpc":"2.0"}', None, -32700),
                   (b'{"jsonrpc":"1.0","id":7,"method":"session/list","params":{}}', 7, -32600),
                   (b'{"id":8,"method":"session/list","params":{}}', 8, -32600),
                   (b'{"jsonrpc":"2.0","id":{"a":1},"method":"session/list","params":{}}', None, -32600),
                   (b'{"jsonrpc":"2.0","id":true,"method":"session/list","params":{}}', None, -32600),
                   (b'{"jsonrpc":"2.0","method":5}', None, -32600),
                   (b'{"jsonrpc":"2.0","id":9,"method":"session/list","params":[1]}', 9, -32600),
                   (b'{"jsonrpc":"2.0","id":10}', None, -32600)]
        for line, ident, code in attacks:
            start = len(client.received)
            client.send_raw(line, answered_as=ident)
            answer = client.wait(lambda m: "error" in m and m.get("id") == ident and "method" not in m, timeout=10)
            assert answer["error"]["code"] == code, (line, answer)
            assert any(m is answer for m in client.received[start:])  # this line's answer, not an earlier one
        unknown = client.request("session/nonexistent", {}, bad=True)
        assert error_of(unknown)[0] == -32601
        # the turn went on through all of it: its command finished, its answer came
        answer = client.wait(lambda m: m.get("id") == prompt)
        assert answer["result"]["stopReason"] == "end_turn" and (project / "late.txt").exists()

        # $/cancel_request cancels a running prompt as session/cancel does
        prompt = client.start("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "second"}]})
        for _ in range(300):
            if (project / "going.txt").exists():
                break
            time.sleep(0.02)
        client.notify("$/cancel_request", {"requestId": prompt})
        answer = client.wait(lambda m: m.get("id") == prompt, timeout=20)
        assert answer["result"]["stopReason"] == "cancelled"
        assert sleeping() == []
    finally:
        assert client.close() == 0
    assert client.checker.problems() == []

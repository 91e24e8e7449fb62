"""Issue 49.1: `clovercode acp` answers the editor's `initialize` before the SDK has loaded.

The first-line reader (front/acp/firstline.py) answers only a line the allowlist (handshake.py) takes,
with the dict the SDK path answers from; everything else reaches the SDK's connection byte for byte.
These tests hold the two paths to one answer, the allowlist inside what the SDK accepts, the quick
argument parser (early.py) equal to typer's, and the handoff exact on the raw wire.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import cli_env, write_replay

acp = pytest.importorskip("acp")

from acp.schema import InitializeRequest, InitializeResponse  # noqa: E402

from clovercode.front.acp import handshake  # noqa: E402
from clovercode.front.acp.early import TRUST, VALUE_OPTIONS, quick_flags  # noqa: E402
from clovercode.front.acp.firstline import CAP, FirstLine  # noqa: E402
from clovercode.front.acp.transport import params_problem, problem  # noqa: E402

PARAMS = {"protocolVersion": 1, "clientCapabilities": {}}


def request(ident: object = 1, params: object = PARAMS, **extra: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": ident, "method": "initialize", "params": params, **extra}).encode() + b"\n"


# What editors send (Zed's shape, the TypeScript SDK's, the bare minimum): each answered early.
PLAIN = [
    request(),
    request("a-string-id", {"protocolVersion": 1}),
    request(7, {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True},
                                                             "terminal": True, "_meta": {"terminal_output": True}},
                "clientInfo": {"name": "zed", "title": "Zed", "version": "0.200.0"}, "_meta": {}}),
    request(0, {"protocolVersion": 0, "clientCapabilities": {"fs": {}}, "clientInfo": {"name": "n", "version": "1",
                                                                                       "title": None}}),
    request(2**53 - 1, {"protocolVersion": 65535, "clientCapabilities": {"fs": {"_meta": None}}, "clientInfo": None}),
]
# Lines the SDK path must judge (each answered differently, coerced, or refused there).
NOT_PLAIN = [
    b"\n", b"not json\n", b"\xff\xfe\n", b"[" * 100000 + b"\n", b"[]\n", b"null\n",
    request(True), request(None), request(1.0), request(2**53), request([1]), request("x" * 300), request("\ud800"),
    request(params={"protocolVersion": "1"}), request(params={"protocolVersion": True}),
    request(params={"protocolVersion": -1}), request(params={"protocolVersion": 65536}),
    request(params={"protocolVersion": 1.0}), request(params={}), request(params=None), request(params=[1]),
    request(params={"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": "true"}}}),
    request(params={"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": 1}}}),
    request(params={"protocolVersion": 1, "clientCapabilities": {"auth": {"terminal": True}}}),
    request(params={"protocolVersion": 1, "clientCapabilities": None}),
    request(params={"protocolVersion": 1, "clientInfo": {"name": "zed"}}),
    request(params={"protocolVersion": 1, "clientInfo": {"name": "\ud800", "version": "1"}}),
    request(params={"protocolVersion": 1, "unknown": 1}),
    request(params={"protocolVersion": 1, "_meta": []}),
    request(extra=1),
    json.dumps({"jsonrpc": "2.0", "method": "initialize", "params": PARAMS}).encode() + b"\n",  # a notification
    json.dumps({"jsonrpc": "1.0", "id": 1, "method": "initialize", "params": PARAMS}).encode() + b"\n",
    json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/"}}).encode() + b"\n",
]


def test_the_early_answer_is_the_one_the_sdk_path_builds() -> None:
    result = handshake.initialize_result()
    assert handshake.PROTOCOL_VERSION == acp.PROTOCOL_VERSION
    # server.CloverAgent.initialize validates this dict; the SDK's connection dumps it so (acp/connection.py)
    dumped = InitializeResponse.model_validate(result).model_dump(mode="json", by_alias=True, exclude_none=True,
                                                                  exclude_unset=True)
    assert dumped == result
    assert json.loads(handshake.answer_line(5)) == {"jsonrpc": "2.0", "id": 5, "result": result}


@pytest.mark.parametrize("line", PLAIN)
def test_every_request_the_allowlist_answers_the_sdk_path_accepts(line: bytes) -> None:
    message = handshake.plain_initialize(line)
    assert message is not None
    assert problem(message) is None and params_problem("initialize", message["params"]) is None
    InitializeRequest.model_validate(message["params"])  # the SDK's router validates the params so


@pytest.mark.parametrize("line", NOT_PLAIN, ids=range(len(NOT_PLAIN)))
def test_anything_else_is_left_to_the_sdk_path(line: bytes) -> None:
    assert handshake.plain_initialize(line) is None


def reader_over(data: bytes, close: bool = True) -> tuple[FirstLine, int]:
    """A FirstLine over a real pipe holding ``data``; returns it with the read end of its output pipe."""
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    fcntl.fcntl(stdin_w, fcntl.F_SETPIPE_SZ, 1024 * 1024)  # all of ``data`` fits: one write, no writer thread
    assert os.write(stdin_w, data) == len(data)
    if close:
        os.close(stdin_w)
    first = FirstLine(stdin=stdin_r, stdout=out_w)
    first.wait()
    os.close(out_w)
    os.close(stdin_r)
    if not close:
        os.close(stdin_w)
    return first, out_r


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def test_the_first_line_reader_answers_a_plain_initialize_and_hands_on_what_follows() -> None:
    following = b'{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/p","mcpServers":[]}}\n{"part'
    first, out = reader_over(PLAIN[2] + following)
    assert first.handoff.answered == json.loads(PLAIN[2]) and first.handoff.prefix == following
    assert read_all(out) == handshake.answer_line(7)


@pytest.mark.parametrize("data", [b"", b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}',
                                  b"\n" + PLAIN[0], b"not json\n" + PLAIN[0], NOT_PLAIN[6] + PLAIN[0]],
                         ids=["eof", "eof-before-newline", "blank-first", "malformed-first", "bool-id"])
def test_the_first_line_reader_answers_nothing_else_and_hands_on_every_byte(data: bytes) -> None:
    first, out = reader_over(data)
    assert first.handoff.answered is None and first.handoff.prefix == data
    assert read_all(out) == b""


def test_a_first_line_longer_than_the_cap_is_handed_on_unread_past_the_cap() -> None:
    # The line goes on (stdin stays open): the reader stops past the cap, the rest stays for the SDK's reader.
    data = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1},"pad":"' + b"x" * (4 * CAP)
    first, out = reader_over(data, close=False)
    assert first.handoff.answered is None and data.startswith(first.handoff.prefix) and len(first.handoff.prefix) > CAP
    assert read_all(out) == b""


def typer_flags(argv: list[str]) -> tuple[dict, bool]:
    """The flags ``clovercode acp ARGV`` gets from typer (front/cli.py's acp_command)."""
    import typer

    from clovercode.front.cli import app

    group = typer.main.get_command(app)
    command = group.get_command(group.make_context("clovercode", ["acp"]), "acp")
    params = dict(command.make_context("acp", list(argv)).params)
    return params, params.pop("trust_project")


def test_the_quick_parser_knows_every_acp_option_and_reads_them_as_typer_does() -> None:
    import typer

    from clovercode.front.cli import app

    group = typer.main.get_command(app)
    command = group.get_command(group.make_context("clovercode", ["acp"]), "acp")
    names = {name for param in command.params for name in param.opts}
    assert names - {"--help"} == set(VALUE_OPTIONS) | {TRUST}
    for argv in ([], ["--model", "replay:x.jsonl"], ["-m", "m"], ["--model=a=b"], ["--sandbox", "none", "--trust-project"],
                 ["--approval", "full-auto", "--max-steps", "007", "--max-time", "2.50", "--endpoint", "http://h/v1",
                  "--api-key", "k", "--endpoint-stream", "false"], ["--max-time=3", "--max-steps=4", "--model", "ünï"]):
        quick = quick_flags(argv)
        assert quick is not None, argv
        assert quick == typer_flags(argv), argv


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["--model"], ["--model", "--sandbox", "x"], ["--model="],
                                  ["--model", "a", "--model", "b"], ["-m=x"], ["-mx"], ["--max-steps", "+5"],
                                  ["--max-steps", "1e3"], ["--max-time", "inf"], ["--max-steps", "٣"],
                                  ["--trust-project", "--trust-project"], ["--bogus", "x"], ["extra"], ["--", "x"],
                                  ["--trust-project=1"]])
def test_the_quick_parser_leaves_anything_unusual_to_typer(argv: list[str]) -> None:
    assert quick_flags(argv) is None


def agent(tmp_path: Path, *flags: str, **env: str) -> subprocess.Popen:
    replay = write_replay(tmp_path / "r.jsonl", "hi")
    return subprocess.Popen([sys.executable, "-m", "clovercode", "acp", "--model", f"replay:{replay}", *flags],
                            cwd=tmp_path, env=cli_env(**env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_on_the_wire_the_early_answer_equals_the_sdks_and_the_stream_goes_on(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    proc = agent(tmp_path)
    assert proc.stdin is not None and proc.stdout is not None
    watchdog = threading.Timer(60, proc.kill)  # an answer that never comes fails the test, not the suite
    watchdog.start()
    new = {"jsonrpc": "2.0", "id": "n", "method": "session/new", "params": {"cwd": str(project), "mcpServers": []}}
    # initialize and the next request in one write: the reader takes both, answers one, hands on the other
    proc.stdin.write(PLAIN[2] + json.dumps(new).encode() + b"\n")
    proc.stdin.flush()
    early = proc.stdout.readline()
    opened = json.loads(proc.stdout.readline())
    assert opened["id"] == "n" and "sessionId" in opened["result"], opened
    proc.stdin.write(PLAIN[2])  # the same request again: this time the SDK's connection answers it
    proc.stdin.flush()
    later = proc.stdout.readline()
    while json.loads(later).get("method") == "session/update":  # the new session's commands may come between
        later = proc.stdout.readline()
    proc.stdin.close()
    err = proc.stderr.read().decode() if proc.stderr else ""
    watchdog.cancel()
    assert proc.wait(timeout=60) == 0, err
    assert early == handshake.answer_line(7) and later == early  # the same bytes from both paths
    assert "before the SDK loaded" not in err and "Traceback" not in err, err


def test_on_the_wire_an_over_long_first_line_reaches_the_sdk_whole(tmp_path: Path) -> None:
    proc = agent(tmp_path)
    out, err = proc.communicate(b'{"pad":"' + b"x" * (3 * CAP) + b'"}\n' + PLAIN[1], timeout=60)
    answers = [json.loads(line) for line in out.splitlines()]
    # the SDK path's answers: one line that is no request (id null), then the handshake
    assert [a["id"] for a in answers] == [None, "a-string-id"] and answers[0]["error"]["code"] == -32600, answers
    assert answers[1]["result"] == handshake.initialize_result() and proc.returncode == 0, err


@pytest.mark.parametrize("flags,env", [(["--sandbox", "bogus"], {}), ([], {"CLOVERCODE_CONFIG": "/nonexistent.toml"})],
                         ids=["bad-flag", "bad-config"])
def test_a_bad_flag_or_config_is_refused_before_any_answer(tmp_path: Path, flags: list[str], env: dict) -> None:
    proc = agent(tmp_path, *flags, **env)
    out, err = proc.communicate(PLAIN[0], timeout=60)
    assert out == b"" and proc.returncode == 2 and b"Traceback" not in err, (out, err)


@pytest.mark.parametrize("which", ["stdout", "stdin"])
def test_a_regular_file_for_stdin_or_stdout_is_a_usage_error_not_a_crash(tmp_path: Path, which: str) -> None:
    """`clovercode acp > log.txt` (or `< requests.jsonl`): asyncio's pipe streams refuse a regular file;
    before, the agent answered initialize and then crashed with exit 70 and a crash report."""
    replay = write_replay(tmp_path / "r.jsonl", "hi")
    file = tmp_path / "file.jsonl"
    file.write_bytes(PLAIN[0])
    command = [sys.executable, "-m", "clovercode", "acp", "--model", f"replay:{replay}"]
    if which == "stdin":
        with file.open("rb") as handle:
            proc = subprocess.run(command, cwd=tmp_path, env=cli_env(), stdin=handle, capture_output=True, timeout=60)
    else:
        with file.open("wb") as handle:
            proc = subprocess.run(command, cwd=tmp_path, env=cli_env(), input=PLAIN[0], stdout=handle,
                                  stderr=subprocess.PIPE, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"its standard {'output' if which == 'stdout' else 'input'} is a regular file".encode() in proc.stderr
    assert b"Traceback" not in proc.stderr and b"internal error" not in proc.stderr
    if which == "stdout":
        assert file.read_bytes() == b""  # no answer before the refusal


def waiting_for_the_first_line(pid: int) -> bool:
    """The main thread blocked on a lock (FirstLine.wait), the reader thread on the pipe: the kernel's view."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            states.append((task.name == str(pid), (task / "wchan").read_text()))
        except OSError:
            return False
    return any(main and "futex" in wchan for main, wchan in states) and \
        any(not main and "pipe_read" in wchan for main, wchan in states)


def test_a_signal_while_waiting_for_the_first_line_ends_the_agent_by_its_code(tmp_path: Path) -> None:
    proc = agent(tmp_path)
    deadline = time.monotonic() + 30
    while not waiting_for_the_first_line(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and out == b"" and b"Traceback" not in err, (proc.returncode, out, err)

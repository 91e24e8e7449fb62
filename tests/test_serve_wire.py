"""`clovercode serve` speaks HTTP/1.1 that never desyncs: an answer given before a body was read
(404, 405, 401, any error) either reads that body or closes the connection, so the next request on a
kept-alive or pipelined connection is read from its own first byte. Raw sockets on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import struct
import threading
from typing import BinaryIO

import pytest
from serve_helpers import EchoBackend, running_server, wait_for

from clovercode.backends.base import Finish, TextDelta
from clovercode.serve import waiting as serve_waiting
from clovercode.serve.server import DRAIN_LIMIT


@pytest.fixture(scope="module")
def app():
    with running_server(EchoBackend()) as app:
        yield app


def request(method: str, path: str, body: bytes = b"", extra: str = "") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def chat(text: str) -> bytes:
    return request("POST", "/v1/chat/completions", json.dumps({"model": "test-model", "messages": [
        {"role": "user", "content": text}]}).encode())


def read_response(stream: BinaryIO) -> tuple[int, dict[str, str], dict]:
    """One response off a shared buffered stream (http.client would read past it)."""
    status_line = stream.readline()
    assert status_line.startswith(b"HTTP/1.1 "), status_line
    headers = {}
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, value = line.decode().split(":", 1)
        headers[name.strip().lower()] = value.strip()
    body = stream.read(int(headers.get("content-length", 0)))
    return int(status_line.split()[1]), headers, json.loads(body) if body else {}


def connect(app) -> tuple[socket.socket, BinaryIO]:
    sock = socket.create_connection(("127.0.0.1", app.port), timeout=10)
    return sock, sock.makefile("rb")


BODY = json.dumps({"model": "test-model", "messages": [{"role": "user", "content": "not for this route"}]}).encode()


@pytest.mark.parametrize("bad,status", [
    (request("POST", "/v1/unknown", BODY), 404),
    (request("POST", "/v1/models", BODY), 405),
    (request("GET", "/v1/chat/completions", BODY), 405),
    (request("POST", "/v1/chat/completions", b'{"messages": 5}'), 400),
    (request("POST", "/v1/chat/completions", BODY, "Authorization: Bearer whatever\r\n") + b"", None),
], ids=["404", "405-post-models", "405-get-chat", "400", "unused-auth-header"])
def test_a_bad_request_then_a_good_one_on_one_kept_alive_socket(app, bad, status):
    sock, stream = connect(app)
    with sock:
        sock.sendall(bad)
        first = read_response(stream)
        if status is not None:
            assert first[0] == status, first
        sock.sendall(chat("second"))
        code, _, body = read_response(stream)
    assert code == 200 and body["choices"][0]["message"]["content"] == "echo: second"


def test_pipelined_requests_after_errors_are_each_answered_once_in_order(app):
    sock, stream = connect(app)
    with sock:
        sock.sendall(request("POST", "/v1/unknown", BODY) + request("POST", "/v1/models", BODY) + chat("third")
                     + request("GET", "/health") + chat("fifth"))
        answers = [read_response(stream) for _ in range(5)]
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):  # no unsolicited extra response
            sock.recv(1)
    assert [a[0] for a in answers] == [404, 405, 200, 200, 200]
    assert answers[2][2]["choices"][0]["message"]["content"] == "echo: third"
    assert answers[4][2]["choices"][0]["message"]["content"] == "echo: fifth"


def test_405_names_the_allowed_methods(app):
    sock, stream = connect(app)
    with sock:
        for raw, allowed in [(request("POST", "/v1/models", BODY), "GET, HEAD"), (request("GET", "/v1/chat/completions"), "POST"),
                             (request("PUT", "/v1/responses", BODY), "POST"), (request("DELETE", "/health"), "GET, HEAD")]:
            sock.sendall(raw)
            status, headers, body = read_response(stream)
            assert (status, headers["allow"]) == (405, allowed), (raw, body)
            assert body["error"]["type"] == "invalid_request_error"
            if headers.get("connection") == "close":
                sock.close()
                sock, stream = connect(app)


def test_a_large_unread_body_closes_the_connection_instead_of_being_read_as_a_request(app):
    sock, stream = connect(app)
    with sock:
        smuggled = request("POST", "/v1/chat/completions", json.dumps({"messages": "x"}).encode())
        body = b" " * (DRAIN_LIMIT + 1 - len(smuggled)) + smuggled
        sock.sendall(request("POST", "/v1/unknown", body))
        status, headers, _ = read_response(stream)
        assert (status, headers["connection"]) == (404, "close")
        assert stream.read() == b""  # the tail of the body was never taken for a request


def test_head_answers_the_get_status_and_headers_without_a_body(app):
    """HEAD (issue 48.4): a GET route's status and headers, no body; elsewhere the error's status, no
    body. The next response on the connection is read from its own first byte (none was left over)."""
    sock, stream = connect(app)
    with sock:
        sock.sendall(request("HEAD", "/health") + request("HEAD", "/v1/chat/completions") + request("GET", "/v1/models"))
        for status in (200, 405):
            line = stream.readline()
            assert line.startswith(f"HTTP/1.1 {status} ".encode()), line
            while stream.readline() not in (b"\r\n", b""):
                pass
        status, _, body = read_response(stream)
        assert status == 200 and body["object"] == "list"


def expect_continue(length: int, key: str = "") -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\nExpect: 100-continue\r\n{auth}\r\n").encode()


def test_100_continue_comes_only_after_the_key_and_the_size_pass():
    """Expect: 100-continue (issue 48.4): a wrong key or a body over the limit gets its error and the
    connection closes, with no 100 inviting the body first; a good request gets the 100, then its answer."""
    body = chat("hi").split(b"\r\n\r\n", 1)[1]
    with running_server(EchoBackend(), api_key="right", max_request_bytes=1000) as keyed:
        for head, status in ((expect_continue(len(body), "wrong"), 401), (expect_continue(5000, "right"), 413)):
            sock, stream = connect(keyed)
            with sock:
                sock.sendall(head)
                got, _, error = read_response(stream)
                assert got == status and error["error"]
                assert stream.read() == b"", "the connection stays open for a body nobody asked for"
        sock, stream = connect(keyed)
        with sock:
            sock.sendall(expect_continue(len(body), "right"))
            assert stream.readline().startswith(b"HTTP/1.1 100 ") and stream.readline() == b"\r\n"
            sock.sendall(body)
            status, _, answer = read_response(stream)
            assert status == 200 and answer["choices"][0]["message"]["content"] == "echo: hi"


class CountingEcho(EchoBackend):
    def count_tokens(self, text: str) -> int:
        return len(text.split())


def test_reasoning_tokens_count_the_reasoning_the_model_produced():
    """Issue 48.4: ``reasoning_tokens`` is the reasoning the model wrote ("<think> calling view_file
    </think>": 4 words for this backend's tokenizer), on chat and Responses, not a constant 0."""
    with running_server(CountingEcho()) as counting:
        sock, stream = connect(counting)
        with sock:
            sock.sendall(chat("CALL:view_file"))
            _, _, answer = read_response(stream)
            sock.sendall(request("POST", "/v1/responses", json.dumps({"input": "CALL:view_file"}).encode()))
            _, _, response = read_response(stream)
            sock.sendall(chat("no reasoning here"))
            _, _, plain = read_response(stream)
    assert answer["usage"]["completion_tokens_details"]["reasoning_tokens"] == 4
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 4
    assert plain["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_half_closes_after_its_request_still_gets_the_answer(stream):
    """Issue 48.4: ``shutdown(SHUT_WR)`` after a complete request (``nc -N``) is no hang-up: the client
    still reads. The answer comes whole; then the connection closes."""
    with running_server(EchoBackend(delay=0.1)) as slow:  # 6 chunks: 0.6 s, past two disconnect checks
        body = json.dumps({"messages": [{"role": "user", "content": "half closed"}], "stream": stream}).encode()
        sock = socket.create_connection(("127.0.0.1", slow.port), timeout=10)
        with sock:
            sock.sendall(request("POST", "/v1/chat/completions", body))
            sock.shutdown(socket.SHUT_WR)
            got = b""
            while piece := sock.recv(65536):
                got += piece
    assert got.startswith(b"HTTP/1.1 200 "), got[:200]
    text = got.decode()
    assert ("echo: half closed" in text) if not stream else ("[DONE]" in text and '"finish_reason": "stop"' in text)


class SilentBackend:
    """Writes one chunk, then is silent (a long prefill, a block's passes) until released."""

    name = "silent"
    context_window = 4096

    def __init__(self):
        self.release = threading.Event()

    def generate(self, messages, tools, params):
        yield TextDelta("first")
        self.release.wait(30)
        yield Finish("stop")

    def close(self):
        pass


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
def test_a_hang_up_is_seen_while_the_model_is_silent(monkeypatch, reset):
    """A client that hangs up (a plain close, or a reset as a killed process's unread data gives) while
    the model writes nothing is seen at once by the hang-up watch, not at the handler's next look
    (put past the test here) or the next event: its row is freed at the model's next step."""
    monkeypatch.setattr(serve_waiting, "DISCONNECT_CHECK_S", 60.0)
    backend = SilentBackend()
    with running_server(backend) as app:
        lines: list[str] = []
        app.log = lines.append
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
        sock = socket.create_connection(("127.0.0.1", app.port), timeout=10)
        sock.sendall(request("POST", "/v1/chat/completions", body))
        got = b""
        while b"first" not in got:
            got += sock.recv(65536)
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        try:
            assert wait_for(lambda: any("client gone" in line for line in lines), timeout=5.0), lines
        finally:
            backend.release.set()

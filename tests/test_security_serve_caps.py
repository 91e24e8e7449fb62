"""Issue 34.6: one client of `clovercode serve` cannot shut out another (docs/security.md, "Trust:
clients of clovercode serve"). Each attack against a real server on 127.0.0.1:

- reconnecting keyless sockets from one host take every connection slot;
- one tenant holding slow request bodies takes every slot (a per-read timeout never fires on a
  body that trickles a byte at a time);
- `/health` without a key shows everyone's counters;
- any key's cache reset empties every tenant's kept prompts.
"""

from __future__ import annotations

import json
import select
import socket
import time

from serve_helpers import EchoBackend, running_server
from test_serve_wire import read_response

ALICE, BOB = "sk-alice-0123456789", "sk-bob-9876543210"
KEYS = {ALICE: "alice", BOB: "bob"}
CHAT = json.dumps({"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}).encode()


def head(key: str | None, length: int = len(CHAT)) -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def ask(port: int, key: str) -> tuple[int, dict]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head(key) + CHAT)
        status, _, body = read_response(sock.makefile("rb"))
        return status, body


def from_address(port: int, address: str) -> socket.socket:
    sock = socket.socket()
    sock.settimeout(10)
    sock.bind((address, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def answered(socks: list[socket.socket], expected: int, seconds: float = 10) -> list[socket.socket]:
    """The sockets the server answered: waits (on all at once) until `expected` have something to
    read or `seconds` pass, then a moment more so that an extra answer would be seen too."""
    ready: set[socket.socket] = set()
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if len(ready) >= expected:
            left = min(left, 0.5)
            deadline = time.monotonic() + left
        readable, _, _ = select.select([s for s in socks if s not in ready], [], [], left)
        if not readable:
            break
        ready.update(readable)
    return [s for s in socks if s in ready]


def test_one_address_cannot_take_every_connection_slot():
    with running_server(EchoBackend(), max_connections=8, per_address=4, api_keys=KEYS) as app:
        flood = [from_address(app.port, "127.0.0.2") for _ in range(8)]  # keyless, never sending a request
        try:
            time.sleep(0.2)
            refused = flood[4]
            status, _, body = read_response(refused.makefile("rb"))
            assert status == 503 and "from your address" in body["error"]["message"]
            assert ask(app.port, ALICE)[0] == 200  # another host still gets in
        finally:
            for sock in flood:
                sock.close()


def test_one_tenant_holding_slow_bodies_leaves_the_others_their_share():
    with running_server(EchoBackend(), max_connections=8, per_tenant=4, body_timeout=30, api_keys=KEYS) as app:
        slow = []
        try:
            for _ in range(8):
                sock = socket.create_connection(("127.0.0.1", app.port), timeout=10)
                sock.sendall(head(BOB) + CHAT[:5])  # the body never completes
                slow.append(sock)
            time.sleep(0.3)
            status, body = ask(app.port, ALICE)
            assert status == 200, body
            # Which four are admitted is a race between the server's threads (each reads its own head):
            # the refused ones are those that got an answer, whatever their order. An admitted one waits
            # for its body (30 s), so it has nothing to read.
            refused = answered(slow, expected=4)
            assert len(refused) == 4, f"{len(refused)} of 8 slow connections were answered"
            for sock in refused:
                status, headers, body = read_response(sock.makefile("rb"))
                assert (status, body["error"]["code"]) == (429, "too_many_connections")
        finally:
            for sock in slow:
                sock.close()


def test_a_body_trickled_a_byte_at_a_time_meets_a_deadline_for_the_whole_body():
    with running_server(EchoBackend(), body_timeout=0.6) as app:
        with socket.create_connection(("127.0.0.1", app.port), timeout=10) as sock:
            started = time.monotonic()
            sock.sendall(head(None))
            sock.settimeout(0.05)
            answer = b""
            for byte in CHAT:  # a byte every 0.05 s: each read is quick, the whole is not
                try:
                    sock.sendall(bytes([byte]))
                    answer += sock.recv(4096)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if answer:
                    break
            sock.settimeout(5)
            stream = sock.makefile("rb")
            status, headers, body = read_response(_Prefixed(answer, stream))
    assert (status, headers["connection"], body["error"]["code"]) == (408, "close", "request_timeout")
    assert time.monotonic() - started < 2


class _Prefixed:
    """A stream that first yields bytes already received."""

    def __init__(self, prefix: bytes, stream):
        self.buffer, self.stream = prefix, stream

    def readline(self) -> bytes:
        if b"\n" not in self.buffer:
            self.buffer += self.stream.readline()
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line + b"\n"

    def read(self, n: int) -> bytes:
        while len(self.buffer) < n and (more := self.stream.read(n - len(self.buffer))):
            self.buffer += more
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out


def test_health_without_a_key_says_only_that_the_server_is_up():
    with running_server(EchoBackend(), api_keys=KEYS) as app:
        with socket.create_connection(("127.0.0.1", app.port), timeout=10) as sock:
            stream = sock.makefile("rb")
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(stream)[2] == {"status": "ok"}
            sock.sendall(f"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {BOB}\r\n\r\n".encode())
            full = read_response(stream)[2]
    assert full["status"] == "ok" and full["model"] == "test-model" and "queued" in full


def test_a_cache_reset_drops_only_the_callers_prompts():
    """The engine seam: the kept prompts of other tenants (and of none) survive a tenant's reset;
    the HTTP side passes the caller's prefix (test_serve_http: test_reset_prefix_cache_...)."""
    from types import SimpleNamespace

    from clovercode.engine.denoiser import CachedDenoiser
    from clovercode.trust.serve import cache_scope, tenant_scope_prefix

    scopes = [cache_scope("bob", None), cache_scope("alice", None), cache_scope("bob", "ticket-7"),
              cache_scope("bobby", None), cache_scope("", None), cache_scope("", "bob")]
    denoiser = object.__new__(CachedDenoiser)  # the rule only: no model needed
    denoiser.checkpoints = [SimpleNamespace(scope=scope) for scope in scopes]
    denoiser.forget_prompts(tenant_scope_prefix("bob"))
    assert [p.scope for p in denoiser.checkpoints] == [scopes[1], scopes[3], scopes[4], scopes[5]]
    denoiser.forget_prompts()
    assert denoiser.checkpoints == []

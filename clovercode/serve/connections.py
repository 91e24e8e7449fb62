"""The connections of ``clovercode serve``: how many, from whom, and how long each may take.

A thread per connection (``http.server``), bounded three ways so no client can shut out another:
all connections (``max_connections``), one address's (``per_address``: reconnecting keyless
sockets from one host), one tenant's once its key is known (``per_tenant``: one key holding slow
bodies). A connection past a cap gets an immediate answer and is closed. The global cap is shared
fairly: when every slot is taken, a newcomer whose party (its address, since its key is not known
yet) holds fewer connections than the largest party takes the slot of one of that party's
connections that is only waiting for a request (never one in the middle of a request), which is
answered 503 and closed. A party is a connection's tenant once its key is known, else its address,
so keyless sockets from a few hosts cannot keep a keyed tenant out. Header and body reads
have deadlines for the whole read, not per ``recv``: a byte a second defeats a per-read timeout.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any

from clovercode.serve.hangups import HangUpWatch
from clovercode.serve.protocol import error_body

HEADER_TIMEOUT_S = 5.0  # default: request line and headers, or a keep-alive connection's idle wait
BODY_TIMEOUT_S = 30.0  # default: the whole request body


def _refusal(status: str, message: str, code: str) -> bytes:
    body = json.dumps(error_body(message, "server_error" if status.startswith("503") else "rate_limit_error",
                                 code)).encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


_BUSY = _refusal("503 Service Unavailable", "too many open connections; retry shortly", "too_many_connections")
_ADDRESS_BUSY = _refusal("503 Service Unavailable", "too many open connections from your address "
                         "(serve.max_connections_per_address); close some and retry", "too_many_connections")


def _hang_up(sock: socket.socket, answer: bytes) -> None:
    """Answer ``answer`` and end the connection (its handler, if any, sees the end and finishes)."""
    try:
        sock.sendall(answer)
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already gone


@dataclass(frozen=True)
class ConnectionCaps:
    """How many connections, from one address, of one tenant; the read deadlines. 0: no cap."""

    max_connections: int = 256
    per_address: int = 0
    per_tenant: int = 0
    header_timeout: float = HEADER_TIMEOUT_S
    body_timeout: float = BODY_TIMEOUT_S


class ServeHTTPServer(ThreadingHTTPServer):
    """A thread per connection, within :class:`ConnectionCaps`: beyond a cap a connection gets an
    immediate 503 (429 for a tenant's), so idle or stalled clients cannot exhaust the process."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # a fleet of bots connecting at once must not be refused by the backlog

    def __init__(self, address: tuple[str, int], app: Any, handler: Any, caps: ConnectionCaps):
        self.app = app  # may be set after binding, before serve_forever
        self.caps = caps
        self.header_timeout = caps.header_timeout
        self._used = 0  # connection slots taken, of caps.max_connections
        self._handed_over: set[socket.socket] = set()  # evicted: their slot already went to a newcomer
        # Each open connection and its handler thread (None until the thread runs), for server_close.
        self._open: dict[socket.socket, threading.Thread | None] = {}
        # Connections waiting for a request line and headers, and when they must have sent them.
        self._deadlines: dict[socket.socket, float] = {}
        self._address_of: dict[socket.socket, str] = {}
        self._by_address: Counter[str] = Counter()
        self._tenant_of: dict[socket.socket, str] = {}
        self._by_tenant: Counter[str] = Counter()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)
        self.hangups = HangUpWatch()  # clients hanging up while the model works on their request (once bound)

    def expect_headers(self, sock: socket.socket) -> None:
        """``sock`` waits for a request (its first, or the next on a kept-alive connection): the line
        and its headers must be in within ``header_timeout`` seconds, however slowly they trickle."""
        with self._open_lock:
            self._deadlines[sock] = time.monotonic() + self.header_timeout

    def headers_done(self, sock: socket.socket) -> None:
        with self._open_lock:
            self._deadlines.pop(sock, None)

    def enter_tenant(self, sock: socket.socket, tenant: str) -> bool:
        """Count ``sock`` as ``tenant``'s (once per connection); False when that would pass the
        tenant's cap, and then it is not counted."""
        with self._open_lock:
            if self._tenant_of.get(sock) == tenant:
                return True
            if self.caps.per_tenant and self._by_tenant[tenant] >= self.caps.per_tenant:
                return False
            self._leave_tenant(sock)
            self._tenant_of[sock] = tenant
            self._by_tenant[tenant] += 1
            return True

    def _leave_tenant(self, sock: socket.socket) -> None:
        tenant = self._tenant_of.pop(sock, None)
        if tenant is not None:
            self._by_tenant[tenant] -= 1
            if not self._by_tenant[tenant]:
                del self._by_tenant[tenant]

    def service_actions(self) -> None:
        """Run by serve_forever between polls: hang up on connections past their header deadline (a
        slow-loris client dribbling a header line now and then; an idle keep-alive connection), so
        they give their connection slot back."""
        now = time.monotonic()
        with self._open_lock:
            late = [sock for sock, deadline in self._deadlines.items() if deadline <= now]
            for sock in late:
                del self._deadlines[sock]
        for sock in late:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def process_request(self, request: Any, client_address: Any) -> None:
        address = str(client_address[0]) if client_address else ""
        victim = None
        with self._open_lock:
            crowded = bool(self.caps.per_address) and self._by_address[address] >= self.caps.per_address
            admitted = not crowded and self._used < self.caps.max_connections
            if admitted:
                self._used += 1
            elif not crowded and (victim := self._victim_for(address)) is not None:
                self._handed_over.add(victim)  # its slot passes to this connection
                self._deadlines.pop(victim, None)
                admitted = True
        if victim is not None:
            _hang_up(victim, _BUSY)
        if not admitted:
            _hang_up(request, _ADDRESS_BUSY if crowded else _BUSY)
            self.shutdown_request(request)
            return
        with self._open_lock:
            self._open = {s: t for s, t in self._open.items() if t is None or t.is_alive()}
            self._open[request] = None
            self._address_of[request] = address
            self._by_address[address] += 1
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: nothing will release the slot or the entry
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open[request] = threading.current_thread()
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.headers_done(request)
            self._forget(request, keep_thread=True)

    def _forget(self, request: Any, keep_thread: bool = False) -> None:
        with self._open_lock:
            if not keep_thread:
                self._open.pop(request, None)
            address = self._address_of.pop(request, None)
            if address is not None:
                self._by_address[address] -= 1
                if not self._by_address[address]:
                    del self._by_address[address]
            self._leave_tenant(request)
            if request in self._handed_over:
                self._handed_over.discard(request)
            else:
                self._used -= 1

    def _party(self, sock: socket.socket) -> str:
        tenant = self._tenant_of.get(sock)
        return f"key:{tenant}" if tenant is not None else f"address:{self._address_of.get(sock, '')}"

    def _victim_for(self, address: str) -> socket.socket | None:
        """With every slot taken: a connection of the largest party that only waits for a request,
        when that party holds at least two more than the newcomer's address. Under ``_open_lock``."""
        parties = Counter(self._party(sock) for sock in self._address_of)
        waiting = [sock for sock in self._deadlines if sock in self._address_of and sock not in self._handed_over]
        if not waiting:
            return None
        victim = max(waiting, key=lambda sock: parties[self._party(sock)])
        return victim if parties[self._party(victim)] > parties[f"address:{address}"] + 1 else None

    def server_close(self, timeout: float = 5.0) -> None:
        """Stop listening, then end the connections still open and wait (at most ``timeout`` s) for
        their handler threads. A keep-alive client may keep a handler thread waiting for its next
        request long after serving stopped, and that thread holds the app: scheduler, backend, model.
        Left running, it can drop the last reference to the model while the interpreter finalizes;
        torch frees a tensor with the GIL released, the thread is refused the GIL back and ended by
        pthread_exit inside a noexcept C++ frame, and std::terminate aborts the process (exit status
        134; pytorch/pytorch#38228)."""
        super().server_close()
        if hasattr(self, "hangups"):  # not when binding failed
            self.hangups.close()
        deadline = time.monotonic() + timeout
        # First only the read side: a reply being written still goes out, an idle wait ends at once.
        for how in (socket.SHUT_RD, socket.SHUT_RDWR):
            if not self._wait_for_handlers(how, deadline if how == socket.SHUT_RDWR else
                                           min(deadline, time.monotonic() + timeout / 2)):
                return

    def _wait_for_handlers(self, how: int, deadline: float) -> bool:
        """Shut ``how`` on every open connection and join their threads until ``deadline``; whether
        any is still open."""
        while True:
            with self._open_lock:
                still = [(s, t) for s, t in self._open.items() if t is None or t.is_alive()]
            if not still or time.monotonic() >= deadline:
                return bool(still)
            for sock, _ in still:
                try:
                    sock.shutdown(how)
                except OSError:
                    pass  # already closed by its handler
            for _, thread in still:
                if thread is None:
                    time.sleep(0.01)  # started, not yet running: look again
                else:
                    thread.join(max(0.0, deadline - time.monotonic()))

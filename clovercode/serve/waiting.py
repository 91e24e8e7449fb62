"""A request's wait for its job's next event, with an eye on its client (the ``Handler``'s part).

The model may stay silent for minutes (a prefill on a CPU host) or seconds (a block's passes), and the
client may hang up meanwhile: the wait ends at once when it does, so its row leaves the batch at the
model's next step. The hang-up watch (serve/hangups.py) wakes the wait with ``LOOK`` when the socket
stirs; the wait also looks by itself every ``DISCONNECT_CHECK_S``, and keeps an idle stream alive.
"""

from __future__ import annotations

import queue
import select
import socket
import time
from typing import Any, Callable

from clovercode.backends.scheduler import Failed, Job, ServerStopping
from clovercode.serve.hangups import failed

DISCONNECT_CHECK_S = 0.25  # a waiting handler's own look at its socket (the hang-up watch sees most at once)
LOOK = object()  # put on a job's event queue by the hang-up watch: look at the socket now
KEEPALIVE = b": keep-alive\n\n"  # an SSE comment: every client ignores it, every proxy sees traffic


class ClientGone(Exception):
    pass


class EventWait:
    """Mixed into the HTTP handler, whose connection, server, app and ``write_chunk`` it uses."""

    _last_check = 0.0  # when _client_gone last looked (per handler instance once set)
    _streaming = False  # a 200 event stream has begun on this request
    _last_write = 0.0  # when the stream last sent something (the keep-alive clock)
    _probed = False  # a probe went out after the client's end of input (see _client_gone)
    _on_hangup: Callable[[], None] = staticmethod(lambda: None)  # wakes this request's wait (serve/hangups.py)
    connection: socket.socket
    close_connection: bool
    server: Any
    app: Any
    write_chunk: Callable[[bytes], None]

    def next_event(self, job: Job, wait: float | None = None) -> Any:
        """The job's next event (None when ``wait`` seconds pass without one); raises ClientGone as
        soon as the client has hung up. While a stream is open, an SSE comment goes out after every
        ``keepalive_s`` without an event; once the server is stopping, the job fails here at once
        (the model may be inside a prefill that takes minutes: the client is not kept waiting)."""
        deadline = None if wait is None else time.monotonic() + wait
        tick = min(DISCONNECT_CHECK_S, self.app.keepalive_s)
        while True:
            now = time.monotonic()
            if now - self._last_check >= DISCONNECT_CHECK_S:
                self._last_check = now
                if self._client_gone():
                    raise ClientGone()
            if self._streaming and now - self._last_write >= self.app.keepalive_s:
                self.write_chunk(KEEPALIVE)
            if deadline is not None and now >= deadline:
                return None
            try:
                item = job.events.get(timeout=tick if deadline is None else max(0.0, min(tick, deadline - now)))
            except queue.Empty:
                if self.app.scheduler.stopping:
                    return Failed(ServerStopping("the server is shutting down"))
                continue
            if item is not LOOK:
                return item
            self._last_check = time.monotonic()  # the hang-up watch saw the socket stir: look now
            if self._client_gone():
                raise ClientGone()

    def _client_gone(self) -> bool:
        """Has the client hung up? An end of input alone does not say so: a client may half-close
        after its request (``nc -N``, a shell's ``shutdown(SHUT_WR)``) and still read the answer. So
        the answer goes on; a stream sends one keep-alive as a probe, which a client that closed for
        good answers with a reset: seen at once on loopback, else when the hang-up watch reports it.
        (Once the end of input has come, a read reports it rather than the reset: ``failed`` asks.)"""
        try:
            if failed(self.connection):
                return True
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable or self.connection.recv(1, socket.MSG_PEEK) != b"":
                return False
        except (OSError, ValueError):
            return True
        self.close_connection = True  # nothing more can come on this connection
        if self._streaming and not self._probed:
            self._probed = True
            self.write_chunk(KEEPALIVE)
            if failed(self.connection):
                return True
            self.server.hangups.watch_reset(self.connection, self._on_hangup)  # the reset, when it comes
        return False

"""A model call another thread may cut short.

A model call that waits on a server (a long prefill: the request is taken, nothing is sent back yet)
has no event at which its caller could read a stop. The caller that must be able to stop it — the
subagents' shared model, for a child whose parent was stopped — runs the call inside
``with abortable(call):``; the endpoint's transport tracks the sockets opened on that thread
(``track``), and ``call.abort()`` from any thread shuts them down, so the blocked read returns at
once and the server sees the client leave. Once aborted, the call opens no new connection (its
retries end at once).

Ground floor: standard library only.
"""

from __future__ import annotations

import socket
import threading
import weakref
from contextlib import contextmanager
from typing import Iterator

_current = threading.local()


class ModelCall:
    """One model call (on one thread) that :meth:`abort` may cut from another."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: "weakref.WeakSet[socket.socket]" = weakref.WeakSet()
        self.aborted = False

    def track(self, sock: socket.socket) -> None:
        """A socket the call reads from; shut down at once if the call was aborted already."""
        with self._lock:
            self._sockets.add(sock)
            if not self.aborted:
                return
        _shut(sock)

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a read blocked in another thread; close() would not
    except OSError:  # closed already, or never connected
        pass


@contextmanager
def abortable(call: ModelCall) -> Iterator[ModelCall]:
    """Run the body as ``call``: connections opened on this thread meanwhile are tracked by it."""
    outer = getattr(_current, "call", None)
    _current.call = call
    try:
        yield call
    finally:
        _current.call = outer


def current() -> ModelCall | None:
    """The call this thread runs as, if any."""
    return getattr(_current, "call", None)

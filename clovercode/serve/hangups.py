"""One thread that notices at once when a client hangs up on a request the model is working on.

A handler waiting for its job's next event can only look at its socket between events, and the
model may be silent for a long time (a prefill, the passes of a block): looking every few tens of
milliseconds costs a wake-up per waiting request, and on a host whose cores run the model those
wake-ups slow every step. Instead every such connection is registered here, and one thread blocks
in ``poll`` on all of them. What it reports, once, through the callback given at registration:

* ``watch``: the socket stirs (the end of the client's input, a reset, unexpected bytes);
* ``watch_reset``: the socket fails (a reset, the peer gone): after an end of input, which may be a
  half-close of a client still reading (``EventWait._client_gone`` writes a probe then), only an
  error says the client closed for good, and ``poll`` reports errors without asking for input.

The handler then looks for itself, and keeps its own slower periodic look for anything else.
"""

from __future__ import annotations

import select
import socket
import threading
from typing import Callable

_STIR = select.POLLIN | select.POLLPRI  # (POLLERR, POLLHUP and POLLNVAL come whatever is asked)


class HangUpWatch:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[socket.socket, Callable[[], None] | None, int]] = []  # applied by the thread
        self._wake_read: socket.socket | None = None
        self._wake_write: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, sock: socket.socket, notify: Callable[[], None]) -> None:
        """Call ``notify`` (on the watch's thread) once ``sock`` is readable or fails; once."""
        self._change(sock, notify, _STIR)

    def watch_reset(self, sock: socket.socket, notify: Callable[[], None]) -> None:
        """Call ``notify`` once ``sock`` fails (however readable it is already); once."""
        self._change(sock, notify, 0)

    def unwatch(self, sock: socket.socket) -> None:
        """Stop watching ``sock`` (before it is closed); unknown sockets are ignored."""
        self._change(sock, None, 0)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._wake()
            thread.join(5.0)

    def _change(self, sock: socket.socket, notify: Callable[[], None] | None, mask: int) -> None:
        with self._lock:
            if self._closed:
                return
            self._pending.append((sock, notify, mask))
            if self._thread is None:
                self._wake_read, self._wake_write = socket.socketpair()
                self._wake_read.setblocking(False)
                self._wake_write.setblocking(False)
                self._thread = threading.Thread(target=self._run, name="clovercode-serve-hangups", daemon=True)
                self._thread.start()
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_write.send(b"\0")  # type: ignore[union-attr]
        except OSError:
            pass  # full (the thread will look anyway) or closed

    def _run(self) -> None:
        assert self._wake_read is not None and self._wake_write is not None
        poller = select.poll()
        wake = self._wake_read.fileno()
        poller.register(wake, select.POLLIN)
        watched: dict[int, tuple[socket.socket, Callable[[], None]]] = {}  # descriptor → socket, callback
        try:
            while not self._closed:
                self._apply(poller, watched)
                for fd, _ in poller.poll():
                    if fd == wake:
                        self._drain()
                        continue
                    _, notify = watched.pop(fd, (None, None))
                    poller.unregister(fd)
                    if notify is not None:
                        try:
                            notify()
                        except Exception:
                            pass  # one callback's failure must not end the watch for the others
        finally:
            self._wake_read.close()
            self._wake_write.close()

    def _apply(self, poller: "select.poll", watched: dict[int, tuple[socket.socket, Callable[[], None]]]) -> None:
        with self._lock:
            changes, self._pending = self._pending, []
        for sock, notify, mask in changes:
            for fd, (known, _) in list(watched.items()):
                if known is sock:  # (found by identity: a closed socket no longer has its descriptor)
                    del watched[fd]
                    poller.unregister(fd)
            fd = sock.fileno()
            if notify is not None and fd >= 0:
                if fd in watched:  # a closed socket's descriptor, reused: its watch is over
                    del watched[fd]
                poller.register(fd, mask)
                watched[fd] = (sock, notify)

    def _drain(self) -> None:
        try:
            while self._wake_read.recv(4096):  # type: ignore[union-attr]
                pass
        except OSError:
            pass


def failed(sock: socket.socket) -> bool:
    """Has ``sock`` failed (reset by the peer, or closed)? Asked of ``poll``, which reports it even after
    the end of the peer's input, where a read only says that end (Linux reads SOCK_DONE first)."""
    poller = select.poll()
    poller.register(sock, 0)
    return bool(poller.poll(0))

"""Keys pressed while a REPL turn runs (the model writing, a command running).

The terminal is put in cbreak mode without echo for the turn, so keys typed meanwhile do not land
in the output (``^[``, stray letters). ISIG stays on, so Ctrl-C still sends SIGINT as it always did.
A watcher thread reads the keys: a lone Esc interrupts the turn the way Ctrl-C does (SIGINT to the
main thread); a line typed and sent with Enter is queued as the next message, and text typed but not
sent becomes the next prompt's starting text, as Claude Code and Codex do. An escape *sequence* (an arrow key, ``ESC [ A``) is not Esc: a lone ESC is one
that no other byte follows within :data:`ESC_TIMEOUT` seconds, as editors tell them apart.

The terminal's settings come back on every way out of the turn (an exception, Ctrl-C, SIGTERM):
:meth:`KeyWatcher.stop` runs in a ``finally`` and restores them before anything else can fail.

Ground floor: standard library only.
"""

from __future__ import annotations

import codecs
import os
import select
import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

ESC = 0x1B
ESC_TIMEOUT = 0.1  # seconds: the rest of an arrow key's sequence arrives well within this, even over ssh
ERASE = (0x7F, 0x08)  # Backspace as terminals send it
KILL_LINE = 0x15  # Ctrl-U


class TypedAhead:
    """Parses the bytes typed during a turn: counts lone Esc presses, keeps the text (pure). Enter
    queues the line typed so far (sent as the next message when the turn ends, as Claude Code
    queues it); Backspace on an empty line takes the last queued message back to edit or clear."""

    def __init__(self) -> None:
        self.text = ""
        self.queued: list[str] = []
        self.held = b""  # an escape sequence not complete yet
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="ignore")

    def feed(self, data: bytes, settled: bool) -> int:
        """Take ``data``; return how many lone Esc presses it held. ``settled``: nothing more arrived
        within the Esc timeout, so an ESC (or a sequence) left unfinished at the end is complete as it is."""
        data, self.held = self.held + data, b""
        escapes = 0
        at = 0
        while at < len(data):
            byte = data[at]
            if byte != ESC:
                self._typed(data[at:at + 1])
                at += 1
                continue
            end = _sequence_end(data, at)
            if end is None:  # cut short: wait for the rest, unless nothing more is coming
                if not settled:
                    self.held = data[at:]
                    break
                if at + 1 == len(data):
                    escapes += 1  # ESC and then nothing: the Esc key
                at = len(data)  # else an unfinished sequence: dropped
                continue
            if end == at + 1:  # ESC ESC: the first is a key of its own
                escapes += 1
            at = end
        return escapes

    def _typed(self, byte: bytes) -> None:
        code = byte[0]
        if code in (0x0D, 0x0A):
            if self.text.strip():
                self.queued.append(self.text.strip())
            self.text = ""
        elif code in ERASE:
            if not self.text and self.queued:
                self.text = self.queued.pop()
            else:
                self.text = self.text[:-1]
        elif code == KILL_LINE:
            self.text = ""
        elif code < 0x20:
            return  # Tab (completion at the prompt), Ctrl-D, Ctrl-Z … do nothing during a turn
        else:
            self.text += "".join(ch for ch in self.decoder.decode(byte) if ch.isprintable())

    def take(self) -> str:
        """The text typed ahead but not queued, for the next prompt; then empty."""
        text, self.text = self.text, ""
        return text

    def take_queued(self) -> list[str]:
        queued, self.queued = self.queued, []
        return queued


def _sequence_end(data: bytes, at: int) -> int | None:
    """Where the escape sequence starting at ``data[at]`` (an ESC) ends; None when it is cut short.
    An ESC followed by another ESC ends at once (a lone Esc)."""
    if at + 1 >= len(data):
        return None
    second = data[at + 1]
    if second == ESC:
        return at + 1
    if second == ord("["):  # CSI: parameters and intermediates, then one final byte 0x40-0x7E
        for index in range(at + 2, len(data)):
            if 0x40 <= data[index] <= 0x7E:
                return index + 1
            if not 0x20 <= data[index] <= 0x3F:
                return index  # malformed: end it here, the byte is read as a key
        return None
    if second == ord("O"):  # SS3: one more byte (F1-F4, arrows in application mode)
        return at + 3 if at + 2 < len(data) else None
    return at + 2  # Alt+key


def interrupt_main_thread() -> None:
    """What Ctrl-C does: SIGINT, delivered to the main thread so that a blocking read there (a
    socket to the model, a command's pipe) is woken up and KeyboardInterrupt is raised."""
    main = threading.main_thread().ident
    if main is not None:
        signal.pthread_kill(main, signal.SIGINT)


class KeyWatcher:
    """For the length of a turn: no echo, keys read by a thread. Use as ``with watcher.turn(): …``."""

    def __init__(self, fd: int, on_escape: Callable[[], None] = interrupt_main_thread,
                 esc_timeout: float = ESC_TIMEOUT):
        self.fd, self.on_escape, self.esc_timeout = fd, on_escape, esc_timeout
        self.typed = TypedAhead()
        self.lock = threading.Lock()
        self.active = False
        self.fired = False  # one interrupt per turn: a second Esc must not cut the clean-up of the first short
        self.saved: list | None = None  # the terminal's settings before the turn
        self.thread: threading.Thread | None = None
        self.wake: tuple[int, int] | None = None

    @contextmanager
    def turn(self) -> Iterator[None]:
        self.start()
        try:
            yield
        finally:
            self.stop()

    @contextmanager
    def paused(self, discard: bool = False) -> Iterator[None]:
        """The terminal as it was, for a question asked mid-turn (an approval); the watcher after.
        ``discard``: drop the text typed so far too, as the terminal's own typeahead is dropped."""
        running = self.thread is not None
        self.stop()
        if discard:
            self.take_typed()
        try:
            yield
        finally:
            if running:
                self.start()

    def start(self) -> None:
        if self.thread is not None:
            return
        try:
            import termios
        except ImportError:  # no termios (Windows): the terminal stays as it is, Ctrl-C still works
            return
        try:
            self.saved = termios.tcgetattr(self.fd)
            quiet = termios.tcgetattr(self.fd)
            quiet[3] &= ~(termios.ECHO | termios.ICANON)  # lflags: no echo, keys one by one; ISIG kept
            quiet[6][termios.VMIN], quiet[6][termios.VTIME] = 1, 0
            termios.tcsetattr(self.fd, termios.TCSANOW, quiet)  # TCSANOW: keys typed so far are kept
        except (OSError, termios.error):  # not a terminal after all: nothing to watch
            self.saved = None
            return
        self.wake = os.pipe()
        with self.lock:
            self.active, self.fired = True, False
            self.typed.held = b""
        self.thread = threading.Thread(target=self._watch, args=(self.wake[0],), name="clovercode-keys", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Restore the terminal first (this may run as a KeyboardInterrupt unwinds), then end the thread."""
        with self.lock:  # after this no Esc is turned into an interrupt
            self.active = False
        try:
            if self.saved is not None:
                import termios

                try:
                    termios.tcsetattr(self.fd, termios.TCSANOW, self.saved)
                except (OSError, termios.error):  # the terminal is gone (SIGHUP): nothing to restore
                    pass
                self.saved = None
        finally:
            thread, wake, self.thread, self.wake = self.thread, self.wake, None, None
            if wake is not None:
                os.write(wake[1], b"x")
            if thread is not None:
                thread.join(timeout=2)
            if wake is not None:
                os.close(wake[1])

    def take_typed(self) -> str:
        with self.lock:
            return self.typed.take()

    def take_queued(self) -> list[str]:
        """Messages queued with Enter during the turn, oldest first; then none."""
        with self.lock:
            return self.typed.take_queued()

    def unqueue(self) -> None:
        """An interrupted turn sends nothing on its own: the queued messages go back to the draft."""
        with self.lock:
            queued = self.typed.take_queued()
            if queued:
                self.typed.text = "\n".join([*queued, self.typed.text]).strip("\n")

    def pending(self) -> tuple[list[str], str]:
        """What the status line shows under itself: the queued messages and the line being typed."""
        with self.lock:
            return list(self.typed.queued), self.typed.text

    def _watch(self, wake: int) -> None:
        try:
            while True:
                waiting = self.esc_timeout if self.typed.held else None  # an ESC: is more coming?
                ready, _, _ = select.select([self.fd, wake], [], [], waiting)
                if wake in ready:
                    return
                data = self._read() if ready else b""
                if data is None:
                    return
                with self.lock:
                    escapes = self.typed.feed(data, settled=not ready)
                    if escapes and self.active and not self.fired:
                        self.fired = True
                        self.on_escape()
        finally:
            os.close(wake)

    def _read(self) -> bytes | None:
        try:
            data = os.read(self.fd, 1024)
        except (BlockingIOError, InterruptedError):
            return b""
        except OSError:  # the terminal went away
            return None
        return data or None


"""One line every few seconds while a slow step runs where no spinner is seen (a log, a pipe, CI).

A terminal gets rich's live status instead (ui/live.py, engine/loading.py); where the output is not a
terminal that status draws nothing, and a model turn of minutes or a model conversion looked like a
hang. Ground floor: standard library only, so the engine and the UI can both use it."""

from __future__ import annotations

import sys
import threading
from typing import Callable

HEARTBEAT_SECONDS = 10.0


def to_stderr(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed or gone: progress is not worth a crash
        pass


class Heartbeat:
    """Calls ``write(line())`` every ``every`` seconds from a daemon thread until stopped."""

    def __init__(self, line: Callable[[], str], write: Callable[[str], None] = to_stderr,
                 every: float = HEARTBEAT_SECONDS):
        self.line, self.write, self.every = line, write, every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "Heartbeat":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="clovercode-heartbeat", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                text = self.line()
            except Exception:  # noqa: BLE001 - a status that cannot be read this time is skipped
                continue
            if not self._stop.is_set():
                self.write(text)

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)

    def __enter__(self) -> "Heartbeat":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

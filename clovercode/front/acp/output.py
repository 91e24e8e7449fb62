"""A running command's output, streamed into its tool call's content while it runs.

Chunks arrive on the worker thread as the command writes them (executors/capture.py). The editor
gets the output so far at most every ``INTERVAL`` seconds (a command printing thousands of lines
must not flood the connection), the last of it by a timer, and the final observation replaces it
all when the command ends. Only the last ``KEEP`` characters are sent each time.
"""

from __future__ import annotations

import codecs
import threading
import time
from typing import Any, Callable

from clovercode.front.acp.markdown import text_block

INTERVAL = 0.25
KEEP = 16000


class LiveOutput:
    def __init__(self, post: Callable[[dict[str, Any]], None], interval: float = INTERVAL):
        self.post, self.interval = post, interval
        self.lock = threading.Lock()
        self.call_id: str | None = None
        self.text = ""
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.last_sent = 0.0
        self.timer: threading.Timer | None = None

    def feed(self, call_id: str, chunk: bytes) -> None:
        with self.lock:
            if call_id != self.call_id:
                self._reset(call_id)
            self.text = (self.text + self.decoder.decode(chunk))[-KEEP:]
            wait = self.last_sent + self.interval - time.monotonic()
            if wait <= 0:
                self._send()
            elif self.timer is None:
                self.timer = threading.Timer(wait, self._late, args=(call_id,))
                self.timer.daemon = True
                self.timer.start()

    def end(self) -> None:
        """The command's call has its observation: nothing more goes out for it."""
        with self.lock:
            self._reset(None)

    def _late(self, call_id: str) -> None:
        with self.lock:
            self.timer = None
            if call_id == self.call_id:
                self._send()

    def _send(self) -> None:
        assert self.call_id is not None
        self.last_sent = time.monotonic()
        self.post({"sessionUpdate": "tool_call_update", "toolCallId": self.call_id, "status": "in_progress",
                   "content": [text_block(self.text)]})

    def _reset(self, call_id: str | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.call_id, self.text, self.last_sent = call_id, "", 0.0
        self.decoder.reset()

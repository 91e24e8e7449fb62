"""Incremental scanning of streamed model text for markup tags (``<think>``, ``<tool_call>`` …).

Text arrives in arbitrary deltas, so a tag may be cut in two; the scanner holds back a possible
tag prefix until the next delta decides it. Callers ask for one token at a time with the tags
that matter in their current state, because which tags count changes after each one.
"""

from __future__ import annotations

from typing import Sequence


class TagScanner:
    def __init__(self) -> None:
        self.buffer = ""

    def feed(self, text: str) -> None:
        self.buffer += text

    def take(self, tags: Sequence[str]) -> tuple[str, str] | None:
        """The next token: ("text", chunk) or ("tag", tag); None when more input is needed."""
        buf = self.buffer
        if not buf:
            return None
        index = buf.find("<")
        if index > 0:
            self.buffer = buf[index:]
            return "text", buf[:index]
        if index == -1:
            self.buffer = ""
            return "text", buf
        tag = next((t for t in tags if buf.startswith(t)), None)
        if tag is not None:
            self.buffer = buf[len(tag):]
            return "tag", tag
        if any(t.startswith(buf) for t in tags):
            return None  # maybe a tag cut across deltas: wait for more
        self.buffer = buf[1:]
        return "text", "<"

    def drain(self) -> str:
        """Everything not yet taken (a held-back tag prefix included)."""
        rest, self.buffer = self.buffer, ""
        return rest

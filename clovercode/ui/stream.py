"""Incremental split of streamed model text into what a person should see live: reasoning and
prose are shown, tool-call markup is hidden (each call is shown formatted once it is parsed)."""

from __future__ import annotations

from clovercode.toolcalls.tagscan import TagScanner

BARE_CALL = "<function="
TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", BARE_CALL)
NEXT_MODE = {"<think>": "reasoning", "</think>": "content", "<tool_call>": "call", "</tool_call>": "content",
             BARE_CALL: "call"}


class StreamFilter:
    def __init__(self, starts_in_reasoning: bool = False):
        self.mode = "reasoning" if starts_in_reasoning else "content"  # content | reasoning | call
        self.scanner = TagScanner()

    def feed(self, text: str) -> list[tuple[str, str]]:
        """Return (kind, text) segments ready to display; kind is "content" or "reasoning"."""
        out: list[tuple[str, str]] = []
        self.scanner.feed(text)
        while (token := self.scanner.take(TAGS)) is not None:
            kind, value = token
            if kind == "tag":
                self.mode = NEXT_MODE[value]
            else:
                self._emit(out, value)
        return out

    def flush(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        self._emit(out, self.scanner.drain())
        return out

    def _emit(self, out: list[tuple[str, str]], text: str) -> None:
        if not text or self.mode == "call":
            return
        if out and out[-1][0] == self.mode:
            out[-1] = (self.mode, out[-1][1] + text)
        else:
            out.append((self.mode, text))

"""Incremental split of streamed model text into what a person should see live: reasoning and
prose are shown, tool-call markup is hidden (each call is shown formatted once it is parsed).

Inside a call only that call's own opener and closer count (think tags in a value are the value's):
an example call written in a value nests, so its closing tag does not end the hiding. The filter
cannot look ahead as the parser does, so a bare closing tag in a value ends the hiding early; that
only changes what is shown live, never what runs."""

from __future__ import annotations

from clovercode.toolcalls.tagscan import TagScanner

BARE_CALL = "<function="
TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", BARE_CALL)
NEXT_MODE = {"<think>": "reasoning", "</think>": "content", "<tool_call>": "call", "</tool_call>": "content",
             BARE_CALL: "call"}
CLOSER = {"<tool_call>": "</tool_call>", BARE_CALL: "</function>"}


class StreamFilter:
    def __init__(self, starts_in_reasoning: bool = False):
        self.mode = "reasoning" if starts_in_reasoning else "content"  # content | reasoning | call
        self.scanner = TagScanner()
        self.call_tags: tuple[str, str] = ("<tool_call>", "</tool_call>")  # the open call's opener and closer
        self.depth = 0  # calls open, the outer one included

    def feed(self, text: str) -> list[tuple[str, str]]:
        """Return (kind, text) segments ready to display; kind is "content" or "reasoning"."""
        out: list[tuple[str, str]] = []
        self.scanner.feed(text)
        while (token := self.scanner.take(self.call_tags if self.mode == "call" else TAGS)) is not None:
            kind, value = token
            if kind == "text":
                self._emit(out, value)
            elif self.mode != "call":
                self.mode = NEXT_MODE[value]
                if self.mode == "call":
                    self.call_tags, self.depth = (value, CLOSER[value]), 1
            elif value == self.call_tags[0]:
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth == 0:
                    self.mode = "content"
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

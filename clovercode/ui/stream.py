"""Incremental split of streamed model text into what a person should see live: reasoning and
prose are shown, tool-call markup is hidden (each call is shown formatted once it is parsed)."""

from __future__ import annotations

TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>")


class StreamFilter:
    def __init__(self, starts_in_reasoning: bool = False):
        self.mode = "reasoning" if starts_in_reasoning else "content"  # content | reasoning | call
        self.pending = ""

    def feed(self, text: str) -> list[tuple[str, str]]:
        """Return (kind, text) segments ready to display; kind is "content" or "reasoning"."""
        out: list[tuple[str, str]] = []
        buf = self.pending + text
        self.pending = ""
        while buf:
            index = buf.find("<")
            if index == -1:
                self._emit(out, buf)
                break
            self._emit(out, buf[:index])
            buf = buf[index:]
            tag = next((t for t in TAGS if buf.startswith(t)), None)
            if tag is None and buf.startswith("<function="):
                self.mode = "call"  # a bare call without the <tool_call> wrapper
                tag = "<function="
            if tag is not None:
                self._switch(tag)
                buf = buf[len(tag):]
                continue
            if any(t.startswith(buf) for t in (*TAGS, "<function=")) and len(buf) < 12:
                self.pending = buf  # maybe a tag split across deltas: wait for more
                break
            self._emit(out, "<")
            buf = buf[1:]
        return out

    def flush(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        self._emit(out, self.pending)
        self.pending = ""
        return out

    def _switch(self, tag: str) -> None:
        if tag == "<think>":
            self.mode = "reasoning"
        elif tag == "<tool_call>":
            self.mode = "call"
        elif tag in ("</think>", "</tool_call>"):
            self.mode = "content"

    def _emit(self, out: list[tuple[str, str]], text: str) -> None:
        if not text or self.mode == "call":
            return
        if out and out[-1][0] == self.mode:
            out[-1] = (self.mode, out[-1][1] + text)
        else:
            out.append((self.mode, text))

"""Server-sent events: the framing OpenAI-compatible servers stream chat completions in."""

from __future__ import annotations

from typing import Callable, Iterator


def iter_sse_data(readline: Callable[[], bytes]) -> Iterator[str]:
    """Yield the data of each event (multi-line data joined by newlines) until the stream ends.

    Comments (keep-alives) and the ``event``/``id``/``retry`` fields are skipped: chat completions
    carry everything in ``data``. A stream cut off mid-event still yields what it had.
    """
    data: list[str] = []
    while True:
        raw = readline()
        if not raw:
            if data:
                yield "\n".join(data)
            return
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)


def sse_event(payload: str) -> bytes:
    """One ``data:`` event, framed (a payload with newlines becomes several data lines)."""
    return "".join(f"data: {line}\n" for line in payload.split("\n")).encode("utf-8") + b"\n"

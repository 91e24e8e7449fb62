"""The protocol's streams: stdin, after the bytes the first-line reader took, and the protocol's fd.

The SDK's ``stdio_streams`` connects stdin as it finds it; here the reader must first get what
firstline.py already read, before any byte the pipe brings, or the stream would be reordered. So the
reader is made with those bytes in it and only then connected; the writer behaves as the SDK's: it
waits while the pipe is full and never raises on a closed one (the editor went away: the connection
ends when stdin does).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, BinaryIO

STDIO_LIMIT = 50 * 1024 * 1024  # one JSON-RPC line may carry a whole file


class _Drain(asyncio.BaseProtocol):
    """Flow control for the writer: ``StreamWriter.drain`` waits while the pipe is full."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.resumed: asyncio.Future[None] | None = None

    def pause_writing(self) -> None:
        if self.resumed is None:
            self.resumed = self.loop.create_future()

    def resume_writing(self) -> None:
        self._wake()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._wake()  # nothing more will be written; a waiting drain must not wait forever

    def _wake(self) -> None:
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)
        self.resumed = None

    async def _drain_helper(self) -> None:  # what StreamWriter.drain awaits
        if self.resumed is not None:
            await asyncio.shield(self.resumed)


async def open_streams(prefix: bytes, out: BinaryIO, limit: int = STDIO_LIMIT) -> tuple[asyncio.StreamReader, Any]:
    """(reader of ``prefix`` then stdin, writer to ``out``)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    reader.feed_data(prefix)  # before the pipe is connected: no byte of it can come first
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    drain = _Drain(loop)
    transport, _ = await loop.connect_write_pipe(lambda: drain, out)
    return reader, asyncio.StreamWriter(transport, drain, None, loop)

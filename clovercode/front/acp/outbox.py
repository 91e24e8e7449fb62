"""From the loop's worker thread to the client, in order.

The agent loop is synchronous and runs on a worker thread; the protocol lives on the asyncio loop.
Every message of one session (updates, permission questions, file reads and writes) goes through
one queue drained by one task, so the client sees them in the order the loop produced them: a
tool call before the question about it, the question before the command's output.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Awaitable, Callable

Send = Callable[[], Awaitable[Any]]
POLL_SECONDS = 0.1  # a cancel (an exception raised into the worker) is noticed between polls


class Outbox:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue[tuple[Send, concurrent.futures.Future[Any], bool] | None] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.question: asyncio.Future[Any] | None = None  # a permission request being waited for
        self.closed = False  # session/close: what is posted from now on fails at once, never waits

    def start(self) -> None:
        """Called on the event loop."""
        self.task = self.loop.create_task(self._drain())

    async def _drain(self) -> None:
        while (item := await self.queue.get()) is not None:
            send, done, question = item
            running = asyncio.ensure_future(send())
            self.question = running if question else None
            try:
                result = await running
            except BaseException as exc:  # also CancelledError: a question dropped by session/cancel
                if not done.cancelled():
                    done.set_exception(exc)
            else:
                if not done.cancelled():
                    done.set_result(result)
            finally:
                self.question = None

    def post(self, send: Send, *, question: bool = False) -> concurrent.futures.Future[Any]:
        """Queue ``send`` from any thread; its result arrives in the returned future. A ``question``
        (a person answers it) is dropped by :meth:`drop_question`; the rest are always sent."""
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.loop.call_soon_threadsafe(self._enqueue, (send, done, question))
        return done

    def _enqueue(self, item: tuple[Send, concurrent.futures.Future[Any], bool]) -> None:
        if self.closed:
            item[1].set_exception(ConnectionError("the session was closed"))
        else:
            self.queue.put_nowait(item)

    def drop_question(self) -> None:
        """On the event loop, at session/cancel: stop waiting for the answer being waited for. The
        client should answer it "cancelled" itself; one that does not must not hold the turn open."""
        if self.question is not None:
            self.question.cancel()

    def call(self, send: Send, *, question: bool = False) -> Any:
        """From the worker: queue ``send`` and wait for its answer. The wait polls, so a session/cancel
        (a KeyboardInterrupt raised into this thread) ends it as Ctrl-C would."""
        done = self.post(send, question=question)
        while True:
            try:
                return done.result(timeout=POLL_SECONDS)
            except concurrent.futures.TimeoutError:
                continue

    async def flush(self) -> None:
        """On the event loop: wait until everything posted so far is sent (before a prompt's or a
        load's answer). The marker is posted as the updates are, through the loop's callbacks (in
        order): put on the queue directly, it would overtake those posted from this very thread."""

        async def reached() -> None:
            return None

        try:
            await asyncio.wrap_future(self.post(reached))
        except ConnectionError:
            pass  # closed meanwhile: nothing more goes out

    async def close(self) -> None:
        self.closed = True
        self.queue.put_nowait(None)
        if self.task is not None:
            await self.task

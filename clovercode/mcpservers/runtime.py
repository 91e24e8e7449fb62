"""An asyncio event loop on a background thread: the synchronous agent loop hands it coroutines
(the MCP SDK is async) and waits for each with a timeout, so a server can never hang the session."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "clovercode-mcp", log: logging.Logger | None = None):
        self.loop = asyncio.new_event_loop()
        self.log = log or logging.getLogger("clovercode.mcp")
        # An error nobody awaited (a server gone mid-notification) belongs in the log, not on the terminal.
        self.loop.set_exception_handler(lambda _loop, context: self.log.debug("%s", context.get("message"),
                                                                              exc_info=context.get("exception")))
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """The coroutine's result; TimeoutError after ``timeout`` s (the coroutine is cancelled then,
        and on Ctrl-C too)."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError from None
        except BaseException:
            future.cancel()
            raise

    def close(self, timeout: float = 5.0) -> None:
        if not self.loop.is_running():
            return

        async def cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=timeout) if tasks else None

        try:
            self.submit(cancel_rest()).result(timeout + 1)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)

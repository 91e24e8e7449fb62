"""One prompt turn on a worker thread, and ``session/cancel`` as Ctrl-C.

The agent loop is synchronous and already knows how to stop on Ctrl-C: a KeyboardInterrupt kills
the running command's process group (executors/capture.py), answers the open tool calls and ends the
run as ``interrupted`` with the trajectory closed. So a cancel raises exactly that exception in the
turn's thread (CPython's PyThreadState_SetAsyncExc: delivered at the thread's next bytecode, which
a command's output pump or an answer wait reaches within a fraction of a second), and nothing else
in clovercode needs to know it runs in an editor.

Stop reasons are mapped honestly onto ACP's few: only the loop's own limits that match one take it;
a time limit, repeated failures or malformed output end the turn (``end_turn``) with the reason said
in the message (updates.py); a model failure is an error answer, not a stop reason.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from typing import Any, Callable

from clovercode.backends.abortable import ModelCall, abortable

STOP_REASONS = {"finished": "end_turn", "answered": "end_turn", "max_tokens": "max_tokens",
                "max_steps": "max_turn_requests", "interrupted": "cancelled", "max_time": "end_turn",
                "format_errors": "end_turn", "repeated_failures": "end_turn"}


def stop_reason(stop: str) -> str | None:
    """ACP's stopReason for the loop's StopReason value; None for a model error (answered as an error)."""
    return STOP_REASONS.get(stop)


def _raise_in(thread_id: int, exc_type: type[BaseException]) -> bool:
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type))
    return done == 1


class Turn:
    """A prompt running on its own thread; ``cancel`` interrupts it while the work runs, never after."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.thread_id: int | None = None
        self.live = False
        self.cancelled = False
        self.thread: threading.Thread | None = None
        # the turn's model call: a read blocked on the server (a long prefill) runs no Python code for the
        # cancel's interrupt to land in, so the cancel also shuts its connection (backends/abortable.py)
        self.call = ModelCall()

    async def run(self, work: Callable[[], Any]) -> Any:
        """``work()`` on a new thread; returns its result, or None when a cancel interrupted it
        before it could return one."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()

        def settle(value: Any = None, error: BaseException | None = None) -> None:
            if not done.done():
                done.set_exception(error) if error is not None else done.set_result(value)

        def body() -> None:
            try:
                result = self._guarded(work)
            except BaseException as exc:  # reported on the event loop, never lost in the thread
                loop.call_soon_threadsafe(settle, None, exc)
            else:
                loop.call_soon_threadsafe(settle, result)

        self.thread = threading.Thread(target=body, name="clovercode-acp-turn", daemon=True)
        self.thread.start()
        return await done

    def _guarded(self, work: Callable[[], Any]) -> Any:
        result = None
        try:
            with self.lock:
                self.thread_id, self.live = threading.get_ident(), not self.cancelled
            if self.live:
                try:
                    with abortable(self.call):
                        result = work()
                finally:
                    with self.lock:
                        self.live = False
        except KeyboardInterrupt:  # a cancel that landed outside the loop's own handling
            pass
        return result

    def stop(self, wait: float) -> None:
        """Cancel and wait for the thread (the client went away): its command must not outlive us."""
        self.cancel()
        if self.thread is not None:
            self.thread.join(wait)

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            if self.live and self.thread_id is not None:
                _raise_in(self.thread_id, KeyboardInterrupt)
                self.call.abort()

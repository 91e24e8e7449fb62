"""The model seen by each child of a group: the parent's model, shared.

- A backend that batches (``open_batch``: the embedded engine, the tiny test model) is driven by the
  slot scheduler ``serve`` uses (backends/scheduler.py), on the parent's thread (the one that loaded the
  model: on CPU a second thread gets an OpenMP pool of its own, docs/endpoint.md "One model thread"):
  the children's turns join one batch and every decoding step is one forward for all live children.
- Any other backend (an endpoint) is called from each child's thread, at most ``limit`` at a time.
- A replay model plays, for each child, the turns labelled with the child's description
  (``"agent": ...`` on the replay line, backends/replay.py), so a test scripts parent and children.

Every child's stream checks its stop between events, and a child's command is killed once the stop is
set (executors ``with_stop``): Esc, Ctrl-C, SIGTERM or the deadline in the parent stops each child at
its next token or within a quarter second of its command, as an interrupt of that child's run.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator, Sequence

from clovercode.backends.abortable import ModelCall, abortable
from clovercode.backends.base import Event, Finish, GenerationParams, ModelBackend
from clovercode.backends.batch import BatchingBackend
from clovercode.ground.messages import Message
from clovercode.ground.termination import ENDING
from clovercode.toolcalls.schemas import ToolSpec


class ChildCancelled(KeyboardInterrupt):
    """The parent stopped this child (Esc, Ctrl-C, SIGTERM in the parent)."""


class ChildStop:
    """The stop of one group of children, set by the parent from any thread, with why: ``cancelled``
    (Esc, Ctrl-C, a signal, a cancel at a question) or ``max_time`` (the parent's deadline). Children
    read it at every model event and while a command runs; their own children's group follows it."""

    def __init__(self, outer: "ChildStop | None" = None):
        self._event, self.outer = threading.Event(), outer
        self.reason, self.detail = "cancelled", "cancelled"

    def set(self, reason: str = "cancelled", detail: str = "cancelled at a question") -> None:
        if not self._event.is_set():
            self.reason, self.detail = reason, detail
        self._event.set()

    def is_set(self) -> bool:
        if not self._event.is_set() and self.outer is not None and self.outer.is_set():
            self.set(self.outer.reason, self.outer.detail)  # a grandchild stops with its parent, for the same reason
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout) or self.is_set()


class ChildModel:
    """One child's view of the shared model; unknown attributes (token counter, window) are the model's."""

    def __init__(self, inner: Any, cancel: ChildStop, generate: Any, label: str):
        self._inner, self._cancel, self._generate, self.label = inner, cancel, generate, label
        self.name = getattr(inner, "name", "model")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        if self._cancel.is_set():
            raise ChildCancelled("stopped by the parent")
        try:
            for event in self._generate(messages, tools, params):
                if self._cancel.is_set():
                    raise ChildCancelled("stopped by the parent")
                yield event
        except Exception:
            if self._cancel.is_set():  # the parent's stop cut the call (its connection shut): a stop, not an error
                raise ChildCancelled("stopped by the parent") from None
            raise

    def close(self) -> None:
        pass  # the parent's model outlives its children


class SharedModel:
    """The parent's model for one group of children; ``close`` stops the batch's model thread."""

    def __init__(self, backend: ModelBackend, limit: int):
        self.backend, self.limit = backend, max(1, limit)
        self.scheduler: Any = None
        self.slots = threading.BoundedSemaphore(self.limit)
        self._calls: set[ModelCall] = set()  # the children's model calls in flight (unbatched backends)
        self._calls_lock = threading.Lock()
        if isinstance(backend, BatchingBackend):
            from clovercode.backends.scheduler import Scheduler

            # A batch of one is a batch: one child alone takes the same decoding path as many (on CPU the
            # batch session is also several times faster than the backend's own generate for clover-tiny).
            # The thread pool, not the batch, bounds how many children run at once.
            self.scheduler = Scheduler(backend, max_batch=max(2, self.limit), max_queue=4 * self.limit)

    def drive(self, finished: threading.Event, stop: ChildStop | None = None) -> None:
        """Run the batch's model loop on this thread until ``finished`` is set; without a batch, wait
        for it (in short waits, so Ctrl-C and SIGTERM reach this thread at once). ChildCancelled when
        ``stop`` was set from elsewhere (the parent of a nested group stopped)."""
        stop = stop or ChildStop()
        scheduler = self.scheduler
        if scheduler is None:
            while not finished.wait(0.05):
                ENDING.check()  # a signal whose interrupt was lost acts here (main thread only)
                if stop.is_set():
                    raise ChildCancelled("stopped by the parent")
            return

        def watch() -> None:
            while not finished.wait(0.05) and not stop.is_set():
                pass
            scheduler.request_stop()
        threading.Thread(target=watch, daemon=True, name="clovercode-subagents-done").start()
        scheduler.run()
        if stop.is_set() and not finished.is_set():
            raise ChildCancelled("stopped by the parent")

    @property
    def batched(self) -> bool:
        return self.scheduler is not None

    def for_child(self, label: str, cancel: ChildStop) -> ChildModel:
        for_agent = getattr(self.backend, "for_agent", None)
        if for_agent is not None:  # a replay: the turns scripted for this child
            inner = for_agent(label)
            return ChildModel(inner, cancel, inner.generate, label)
        if self.scheduler is not None:
            return ChildModel(self.backend, cancel, self._batched, label)
        return ChildModel(self.backend, cancel, self._bounded, label)

    def _bounded(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        call = ModelCall()  # an endpoint's read that waits on the server: cut by close(), not left behind
        with self._calls_lock:
            self._calls.add(call)
        try:
            with self.slots, abortable(call):
                stream = self.backend.generate(messages, tools, params)
                try:
                    yield from stream
                finally:
                    close = getattr(stream, "close", None)
                    if close is not None:
                        close()
        finally:
            with self._calls_lock:
                self._calls.discard(call)

    def _batched(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        import secrets

        from clovercode.backends.scheduler import DONE, Failed, Job

        from clovercode.backends.scheduler import ServerStopping

        job = Job(secrets.token_hex(6), messages, tools, params, client="subagents")
        try:
            self.scheduler.submit(job)
        except ServerStopping:  # the model loop only stops when the parent stops its children
            raise ChildCancelled("stopped by the parent") from None
        try:
            while True:
                item = job.events.get()
                if item == DONE:
                    return
                if isinstance(item, Failed):
                    if isinstance(item.error, ServerStopping):
                        raise ChildCancelled("stopped by the parent")
                    raise item.error
                yield item
                if isinstance(item, Finish):
                    return
        finally:
            self.scheduler.cancel(job)  # a child that stops reading frees its slot

    def close(self) -> None:
        """Stop the model loop; a child still waiting for a turn wakes up stopped, and a child blocked
        in a model call (a server still in its prefill) has its connection shut."""
        with self._calls_lock:
            calls = list(self._calls)
        for call in calls:
            call.abort()
        if self.scheduler is not None:
            self.scheduler.stop()  # not started on a thread of its own: this drains its queue

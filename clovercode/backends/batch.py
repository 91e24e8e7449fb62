"""Optional batching extension of the model seam, used by ``clovercode serve``.

A backend that can decode several conversations in one forward pass offers
``open_batch(max_batch) -> BatchSession``. Requests join and leave between steps (continuous
batching), so a long reply does not hold back the ones queued behind it. Backends without it are
served one request at a time through ``generate``.

Contract:
- ``add(key, ...)`` starts a request (prefill). It may raise ModelError (e.g. ContextTooLong) for that
  request alone; the session stays usable.
- ``step()`` advances every active request by one decoding step and returns the events it produced,
  tagged with their key. A request's events end with ``Usage`` then ``Finish``; after its Finish the
  session has forgotten it. If ``step()`` raises, every active request has failed and the session
  must be closed.
- ``remove(key)`` drops an active request at once (client gone); unknown keys are ignored.
- optional ``add_many([(key, messages, tools, params), ...]) -> {key: exception}``: ``add`` for several
  requests at once, so a session can prefill their prompts together; it returns the requests that
  failed (each alone, or the ones that shared a failed prefill) and the others have joined. A
  session without it gets one ``add`` per request.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from clovercode.ground.messages import Message
from clovercode.backends.base import Event, GenerationParams
from clovercode.toolcalls.schemas import ToolSpec


class BatchSession(Protocol):
    def add(self, key: str, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> None:
        ...

    def step(self) -> list[tuple[str, Event]]:
        ...

    def remove(self, key: str) -> None:
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class BatchingBackend(Protocol):
    def open_batch(self, max_batch: int) -> BatchSession:
        ...

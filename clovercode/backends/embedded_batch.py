"""Continuous batching for the embedded engine: the ``BatchSession`` (backends/batch.py) that
``clovercode serve`` drives, over the engine's ``BatchDecoder``.

A request's events are the ones ``EmbeddedBackend.generate`` yields for it: ``Usage`` with the prompt
size when it is admitted, a ``TextDelta`` per committed block, the total ``Usage``, ``Finish``.
Grammar-constrained requests (``tool_choice`` that needs a grammar, a JSON Schema) join the batch
with their own constraint, compiled as ``generate`` compiles it: the decoder checks each row against
its own grammar after the shared forward (engine/batchdecode.py), so every agent's request, which
always carries tools, is batched with the others.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Sequence

from clovercode.backends.base import Event, Finish, GenerationParams, ModelError, TextDelta, Usage
from clovercode.backends.engineusage import final_usage
from clovercode.engine.batchdecode import BatchDecoder, Request
from clovercode.engine.decoder import DecodePlan, DecodeResult
from clovercode.ground.messages import Message
from clovercode.toolcalls.schemas import ToolSpec

if TYPE_CHECKING:
    from clovercode.backends.embedded import EmbeddedBackend


class EmbeddedBatchSession:
    def __init__(self, backend: "EmbeddedBackend", max_batch: int):
        self.backend = backend
        self.engine = backend.engine
        self.max_batch = max_batch
        self.decoder = BatchDecoder(self.engine.batch_denoiser(max_batch), self.engine.detokenize)
        self.requests: dict[str, tuple[DecodePlan, float, bool]] = {}  # key → (plan, when it arrived, constrained)
        self.admitted: list[tuple[str, Event]] = []

    def add(self, key: str, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> None:
        failure = self.add_many([(key, messages, tools, params)]).get(key)
        if failure is not None:
            raise failure

    def add_many(self, requests: Sequence[tuple[str, Sequence[Message], Sequence[ToolSpec], GenerationParams]]
                 ) -> dict[str, Exception]:
        """Several requests at once, their prompts prefilled together (one forward where the engine
        can: ``BatchDecoder.add_many``). → the requests that failed, with why; the others joined. A
        request that cannot join (a grammar, no room, a prompt too long) fails alone; a failed prefill
        fails the requests that shared it."""
        failures: dict[str, Exception] = {}
        ready: list[tuple[Request, float]] = []
        for key, messages, tools, params in requests:
            started = time.perf_counter()
            try:
                if len(self.decoder) + len(ready) >= self.max_batch:
                    raise RuntimeError(f"embedded batch: all {self.max_batch} slots are taken")
                prompt, plan = self.backend.prepare(messages, tools, params)
                constraint = self.backend.compile_constraint(tools, params, plan.max_new_tokens)
            except Exception as exc:
                failures[key] = exc
                continue
            ready.append((Request(key, prompt, plan, self.engine.stops(params.stop),
                                  self.engine.generator(plan, params.seed), constraint), started))
        if not ready:
            return failures
        prompt_tokens = sum(len(r.prompt) for r, _ in ready)
        try:
            with _out_of_memory_as_model_error(self.engine.name, prompt_tokens):
                self.decoder.add_many([r for r, _ in ready])
        except Exception as exc:
            failures.update((r.key, exc) for r, _ in ready)
            return failures
        for r, started in ready:
            self.requests[r.key] = (r.plan, started, r.constraint is not None)
            self.admitted.append((r.key, Usage(prompt_tokens=len(r.prompt))))
        return failures

    def step(self) -> list[tuple[str, Event]]:
        events, self.admitted = self.admitted, []
        with _out_of_memory_as_model_error(self.engine.name, None):
            items = self.decoder.step()
        for key, item in items:
            if isinstance(item, DecodeResult):
                plan, started, constrained = self.requests.pop(key)
                extra = {"constrained": True, "remasked": item.stats.remasked} if constrained else {}
                events.append((key, final_usage(item, plan, time.perf_counter() - started, extra)))
                events.append((key, Finish(item.finish)))
            elif item:
                events.append((key, TextDelta(item)))
        return events

    def timeline(self) -> dict[str, float]:
        """Seconds spent, summed over this session: the steps' forward and the grammars' host work in
        them, and the admissions' prefills."""
        return {"forward_s": self.decoder.forward_s, "grammar_s": self.decoder.grammar_s,
                "prefill_s": self.decoder.prefill_s}

    def remove(self, key: str) -> None:
        self.decoder.remove(key)
        self.requests.pop(key, None)
        self.admitted = [event for event in self.admitted if event[0] != key]

    def forget_prompts(self, scope: str | None = None) -> None:
        forget = getattr(self.decoder.denoiser, "forget_prompts", None)
        if forget is not None:
            forget(scope)

    def close(self) -> None:
        for key in list(self.decoder.active):
            self.decoder.remove(key)
        self.requests.clear()


@contextmanager
def _out_of_memory_as_model_error(model: str, prompt_tokens: int | None) -> Iterator[None]:
    """A device out of memory is a ModelError (the request, or the batch, fails; the server goes on)."""
    try:
        yield
    except RuntimeError as exc:
        if "out of memory" not in str(exc).lower():
            raise
        where = f" ({prompt_tokens} prompt tokens)" if prompt_tokens is not None else " (batched step)"
        raise ModelError(f"out of memory while generating with {model}{where}") from None

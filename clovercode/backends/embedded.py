"""The embedded backend: the model runs in-process through the block-diffusion engine.

It renders the conversation with the model's chat template (tools included), decodes with the
engine, streams each committed block as a TextDelta, and reports usage with the engine's counters
(forward passes, tokens per forward, prefill time, time to first block).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from rich.console import Console

from clovercode.ground.messages import Message
from clovercode.backends.base import ContextTooLong, Event, Finish, GenerationParams, ModelError, TextDelta, Usage
from clovercode.backends.engineusage import final_usage
from clovercode.engine.chat import call_format, render_prompt
from clovercode.engine.constraint import Constraint, Steering
from clovercode.engine.grammar import (CALL_CLOSINGS, CALL_OPENING, REASONING_END, GrammarError, json_grammar,
                                      shortest_call, tool_call_grammar)
from clovercode.engine.config import EngineConfig, engine_config_from
from clovercode.engine.decoder import DecodePlan, DecodeResult
from clovercode.engine.linerepeats import MAX_REPEATS
from clovercode.engine.loading import template_failure
from clovercode.engine.engine import Engine
from clovercode.ground.config import state_dir
from clovercode.ground.errors import UsageError
from clovercode.toolcalls.schemas import ToolSpec

if TYPE_CHECKING:
    from clovercode.backends.embedded_batch import EmbeddedBatchSession

DEFAULT_MAX_PROSE = 512  # tokens of prose a turn that must call may write before it is steered into the call
# Prose may take at most this share of a turn's token limit: the call needs the rest (a 135M model
# given half of 256 tokens for prose left its calls too little room to finish a value).
PROSE_SHARE = 8


class EmbeddedBackend:
    constrains_output = True  # honours GenerationParams.tool_choice / json_schema with a grammar
    batch_constraints = True  # its batch sessions take constrained requests (each row its own grammar)

    def __init__(self, engine: Engine):
        self.engine = engine
        self.name = f"embedded:{engine.name}"
        self._token_chars: int | None = None

    @property
    def context_window(self) -> int:
        """The positions a request may hold here: the model's window, engine.max_context, and the memory
        plan's limit on this device, whichever is least (what prompts are fitted into, and what serve
        reports as max_model_len)."""
        return self.engine.max_context or self.engine.context_window

    def count_tokens(self, text: str) -> int:
        return self.engine.count_tokens(text)

    def prepare(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> tuple[list[int], DecodePlan]:
        """The prompt's tokens and the decoding plan for one request; ContextTooLong when it does not fit."""
        text = self._render(messages, tools, params.thinking)
        limit = self.engine.max_context
        # no token covers more characters (x2 for a normalizer that composes): it cannot fit, so it is not tokenized
        if len(text) > 2 * limit * self._max_token_chars():
            raise ContextTooLong(f"the prompt ({len(text):,} characters) cannot fit the {limit:,} tokens of "
                                 f"{self.engine.name}: no token of its vocabulary is longer than "
                                 f"{self._max_token_chars()} characters")
        prompt = self.engine.encode(text)
        room = limit - len(prompt)
        if room < 1:
            raise self.too_long(len(prompt), limit)
        plan = self.engine.plan(temperature=params.temperature, top_p=params.top_p,
                                max_new_tokens=max(1, min(params.max_new_tokens, room)))
        return prompt, replace(plan, cache_scope=params.cache_scope)

    def too_long(self, tokens: int, limit: int) -> ContextTooLong:
        """The refusal of a prompt of ``tokens`` over ``limit``, naming what sets the limit: the memory
        plan (with the weights mode that would hold it), engine.max_context, or the model's window."""
        window = self.engine.context_window
        planned = self.engine.context_limit()
        if planned is not None and planned.from_plan and limit == planned.positions:
            return ContextTooLong(
                f"the prompt ({tokens:,} tokens) does not fit: {planned.describe()}; {planned.advice(tokens + 1)}",
                prompt_tokens=tokens, window=limit,
                hint="Free device memory, load quantized weights (engine.quantization), or shorten the prompt.")
        if limit < window:
            return ContextTooLong(f"the prompt ({tokens} tokens) does not fit engine.max_context = {limit} tokens (the "
                                  f"positions one request may hold in the memory plan; the model's context window "
                                  f"is {window})", prompt_tokens=tokens, window=limit)
        return ContextTooLong(f"the prompt ({tokens} tokens) does not fit the context window of {self.engine.name} "
                              f"({window} tokens)", prompt_tokens=tokens, window=window)

    def refuse_task(self, tokens: int) -> ContextTooLong | None:
        """The refusal of a task whose prompt (``tokens``) cannot fit where the memory plan, not the model,
        sets the window: the context layer cuts a task only to fit the model's window, never to fit a
        device that another weights mode would hold it on. None: not the plan's limit (the task is cut)."""
        planned = self.engine.context_limit()
        limit = self.engine.max_context
        if planned is None or not planned.from_plan or limit != planned.positions:
            return None
        return self.too_long(tokens, limit)

    def overflow_advice(self, tokens: int) -> str | None:
        """What serve adds to a refusal counted before the queue: what sets the limit under the model's
        window (the memory plan, with the weights mode that would hold the prompt, or engine.max_context)."""
        planned = self.engine.context_limit()
        limit, window = self.engine.max_context, self.engine.context_window
        if planned is not None and planned.from_plan and limit == planned.positions:
            return f"{planned.describe()}; {planned.advice(tokens + 1)}"
        if limit and limit < window:
            return (f"engine.max_context = {limit} tokens (the positions one request may hold in the memory plan; "
                    f"the model's context window is {window})")
        return None

    def _max_token_chars(self) -> int:
        """The longest token of the vocabulary, in characters (as stored: never shorter than the text it
        stands for), so a prompt that cannot fit is refused before tokenizing it costs time and memory."""
        if self._token_chars is None:
            vocab = self.engine.tokenizer.get_vocab()
            self._token_chars = max((len(token) for token in vocab), default=1) or 1
        return self._token_chars

    def _render(self, messages: Sequence[Message], tools: Sequence[ToolSpec], thinking: bool) -> str:
        """The prompt text. The chat template ships with the model: one that fails or tries to leave
        its sandbox on these messages is a model error (exit 5) naming it, never a crash."""
        from jinja2 import TemplateError

        try:
            return render_prompt(self.engine.tokenizer, messages, tools, thinking)
        except TemplateError as exc:
            failure = template_failure(self.engine.name, exc)
            raise ModelError(failure.message, hint=failure.hint) from None

    def forget_prompts(self, scope: str | None = None) -> None:
        """``serve``'s prefix-cache reset: the batch-1 path's kept prompts go (a batch session drops its
        own); with ``scope``, only those of the cache scopes starting with it."""
        self.engine.forget_prompts(scope)

    def batch_slots(self, max_batch: int) -> int:
        """How many of ``max_batch`` requests the memory plan lets decode together (docs/engine.md, "The
        memory plan"): the scheduler admits no more, the rest wait in its queue. From now on a request
        is held to a slot's limit (the server batches: prompts are prefilled beside the slots)."""
        self.engine.batched = True
        plan = self.engine.memory_plan(max_batch)
        return max_batch if plan is None else max(1, plan.slots)

    def memory_plan_line(self, max_batch: int) -> str | None:
        plan = self.engine.memory_plan(max_batch)
        if plan is None:
            return None
        return (f"memory plan: {plan.slots} slots × {plan.slot_tokens:,} tokens, KV {plan.as_dict()['kv_gib']} GiB, "
                f"planned peak {plan.as_dict()['planned_peak_gib']} GiB of {plan.as_dict()['usable_gib']} GiB usable")

    def open_batch(self, max_batch: int) -> "EmbeddedBatchSession":
        """Continuous batching for ``clovercode serve`` (backends/embedded_batch.py)."""
        from clovercode.backends.embedded_batch import EmbeddedBatchSession

        return EmbeddedBatchSession(self, max_batch)

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        started = time.perf_counter()
        prompt, plan = self.prepare(messages, tools, params)
        constraint = self.compile_constraint(tools, params, plan.max_new_tokens)
        yield Usage(prompt_tokens=len(prompt))  # known now; the full count comes when the turn ends
        result: DecodeResult | None = None
        try:
            for item in self.engine.stream(prompt, plan, self.engine.stops(params.stop), seed=params.seed,
                                           constraint=constraint):
                if isinstance(item, DecodeResult):
                    result = item
                elif item:
                    yield TextDelta(item)
        except RuntimeError as exc:
            if "out of memory" in str(exc).lower():
                raise ModelError(f"out of memory while generating with {self.engine.name} "
                                 f"({len(prompt)} prompt tokens)") from None
            raise
        assert result is not None
        yield final_usage(result, plan, time.perf_counter() - started,
                          {"constrained": True, "remasked": result.stats.remasked} if constraint is not None else {})
        yield Finish(result.finish)

    def compile_constraint(self, tools: Sequence[ToolSpec], params: GenerationParams, limit: int) -> Constraint | None:
        """The grammar ``params`` ask for (tool_choice, or a JSON Schema for the reply), compiled."""
        steering = None
        if params.json_schema is not None:
            grammar = json_grammar(params.json_schema, self.engine.grammar_compiler().special, params.thinking)
        elif params.tool_choice is None or (params.tool_choice in ("auto", "none") and not tools):
            return None
        else:
            if not tools:
                raise UsageError(f"tool_choice '{params.tool_choice}' needs tools, and none were offered")
            fmt = call_format(self.engine.tokenizer, True)
            special = self.engine.grammar_compiler().special
            try:
                grammar = tool_call_grammar([{"name": t.name, "parameters": t.parameters} for t in tools],
                                            params.tool_choice, fmt, special)
            except GrammarError as exc:
                raise UsageError(str(exc)) from None
            if params.tool_choice not in ("auto", "none"):
                steering = self._steering(params, limit, tools)
        try:
            return self.engine.constraint(grammar, steering, params.cache_scope)
        except GrammarError as exc:
            raise UsageError(f"the requested output format cannot be enforced: {exc}") from None

    def _steering(self, params: GenerationParams, limit: int, tools: Sequence[ToolSpec]) -> Steering:
        """A turn that must call: prose for at most an eighth of the token limit (the call needs the
        rest), and no new call opened after a complete one when even the shortest would not fit. With
        ``params.close_calls`` (serve's clients, never the agent, whose calls run) an open call is
        closed just before the limit where the grammar lets it (a string value ends), and a limit
        too small for the shortest call is refused up front. A call that cannot close is left cut:
        the harness refuses it."""
        offered = [t for t in tools if params.tool_choice in ("required", t.name)]
        shortest = min((len(self.engine.encode(shortest_call({"name": t.name, "parameters": t.parameters}))), t.name)
                       for t in offered)
        if params.close_calls and limit < shortest[0]:
            error = UsageError(f"max_tokens {limit} cannot hold a call: the shortest, to {shortest[1]}, takes "
                               f"{shortest[0]} tokens", hint="Ask for more tokens, or for tool_choice auto.")
            error.param = "max_tokens"  # type: ignore[attr-defined]  # serve names the field its client sent
            raise error
        budget = max(1, min(params.max_prose or DEFAULT_MAX_PROSE, limit // PROSE_SHARE))
        closings = [self.engine.encode(text) for text in CALL_CLOSINGS]
        closing = max(map(len, closings))
        return Steering(budget, self.engine.encode(CALL_OPENING), (self.engine.encode(REASONING_END + CALL_OPENING),),
                        MAX_REPEATS, params.loop_window, close_at=max(0, limit - closing) if params.close_calls else 0,
                        closings=closings, end_at=max(0, limit - closing - shortest[0]))

    def close(self) -> None:
        self.engine.close()


def open_embedded(spec: str, cfg: Any, base_dir: Path | None = None, console: Console | None = None) -> EmbeddedBackend:
    """Load the model ``spec`` with the engine settings of ``cfg`` (a Config)."""
    config: EngineConfig = engine_config_from(cfg)
    engine = Engine.open(spec, config, console or Console(stderr=True), base_dir, cache_dir=cfg["engine.cache_dir"],
                         noise_log=state_dir(os.environ) / "logs" / "model-load.log")
    return EmbeddedBackend(engine)

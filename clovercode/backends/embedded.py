"""The embedded backend: the model runs in-process through the block-diffusion engine.

It renders the conversation with the model's chat template (tools included), decodes with the
engine, streams each committed block as a TextDelta, and reports usage with the engine's counters
(forward passes, tokens per forward, prefill time, time to first block).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from rich.console import Console

from clovercode.agent.messages import Message
from clovercode.backends.base import ContextTooLong, Event, Finish, GenerationParams, ModelError, TextDelta, Usage
from clovercode.engine.chat import render_prompt
from clovercode.engine.config import EngineConfig, engine_config_from
from clovercode.engine.decoder import DecodeResult
from clovercode.engine.engine import Engine
from clovercode.toolcalls.schemas import ToolSpec


class EmbeddedBackend:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.name = f"embedded:{engine.name}"

    @property
    def context_window(self) -> int:
        return self.engine.context_window

    def count_tokens(self, text: str) -> int:
        return self.engine.count_tokens(text)

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        started = time.perf_counter()
        prompt = self.engine.encode(render_prompt(self.engine.tokenizer, messages, tools, params.thinking))
        room = self.context_window - len(prompt)
        if room < 1:
            raise ContextTooLong(f"the prompt ({len(prompt)} tokens) does not fit the context window of "
                             f"{self.engine.name} ({self.context_window} tokens)")
        plan = self.engine.plan(temperature=params.temperature, top_p=params.top_p,
                                max_new_tokens=max(1, min(params.max_new_tokens, room)))
        yield Usage(prompt_tokens=len(prompt))  # known now; the full count comes when the turn ends
        result: DecodeResult | None = None
        try:
            for item in self.engine.stream(prompt, plan, self.engine.stops(params.stop), seed=params.seed):
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
        stats = result.stats
        yield Usage(prompt_tokens=len(prompt), completion_tokens=stats.new_tokens, forwards=stats.forwards,
                    seconds=time.perf_counter() - started,
                    extra={"tokens_per_forward": round(stats.tokens_per_forward, 3), "block_size": plan.block_size,
                           "prefill_s": round(stats.prefill_s, 4),
                           "first_block_s": round(stats.first_block_s or 0.0, 4)})
        yield Finish(result.finish)

    def close(self) -> None:
        self.engine.close()


def open_embedded(spec: str, cfg: Any, base_dir: Path | None = None, console: Console | None = None) -> EmbeddedBackend:
    """Load the model ``spec`` with the engine settings of ``cfg`` (a Config)."""
    config: EngineConfig = engine_config_from(cfg)
    engine = Engine.open(spec, config, console or Console(stderr=True), base_dir, cache_dir=cfg["engine.cache_dir"])
    return EmbeddedBackend(engine)

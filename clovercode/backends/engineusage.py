"""A finished decode's usage as the backend protocol reports it; shared by the one-request and the
batched embedded backends, so neither imports the other for it."""

from __future__ import annotations

from typing import Any

from clovercode.backends.base import Usage
from clovercode.engine.decoder import DecodePlan, DecodeResult


def final_usage(result: DecodeResult, plan: DecodePlan, seconds: float, extra: dict[str, Any]) -> Usage:
    """The turn's total usage, with the engine's counters."""
    stats = result.stats
    return Usage(prompt_tokens=stats.prompt_tokens, completion_tokens=stats.new_tokens, forwards=stats.forwards,
                 seconds=seconds, cached_tokens=stats.cached_tokens,
                 extra={"tokens_per_forward": round(stats.tokens_per_forward, 3), "block_size": plan.block_size,
                        "prefill_s": round(stats.prefill_s, 4), "first_block_s": round(stats.first_block_s or 0.0, 4),
                        **extra})

"""``--model tiny``: a tiny random-weight character-level transformer, for tests and
``clovercode bench serve``.

Its text is gibberish, but its compute is real: a prefill pass per request, then one forward pass
per decoding step for every active request at once (continuous batching over a slot KV cache),
greedy or sampled, with stop strings and a context window that overflows with ContextTooLong. It
runs in float64 so that a request decoded in a batch gives the same tokens as decoded alone: that
is how the load benchmark checks that no reply was mixed up with another.

Spec: ``tiny`` or ``tiny:dim=64,layers=2,heads=4,context=2048,seed=0``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields
from typing import Any, Iterator, Sequence

from clovercode.ground.messages import Message
from clovercode.backends.base import ContextTooLong, Event, Finish, GenerationParams, TextDelta, Usage
from clovercode.engine.sampler import nucleus
from clovercode.ground.errors import ModelUnavailable, UsageError
from clovercode.toolcalls.schemas import ToolSpec

PREFIX = "tiny"
ALPHABET = "\n" + "".join(chr(c) for c in range(32, 127))
UNK, EOS = len(ALPHABET), len(ALPHABET) + 1
VOCAB = len(ALPHABET) + 2


@dataclass(frozen=True)
class TinyConfig:
    dim: int = 64
    layers: int = 2
    heads: int = 4
    context: int = 2048
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.dim, self.layers, self.heads, self.context) < 1 or self.dim % self.heads:
            raise UsageError(f"tiny model: invalid sizes {self}", hint="dim must be a multiple of heads; all sizes ≥ 1.")


def parse_spec(spec: str) -> TinyConfig:
    """``tiny`` or ``tiny:key=value,...`` → config; a bad spec is a UsageError naming the key."""
    if spec == PREFIX:
        return TinyConfig()
    if not spec.startswith(PREFIX + ":"):
        raise UsageError(f"not a tiny model spec: {spec!r}")
    known = {f.name for f in fields(TinyConfig)}
    values: dict[str, int] = {}
    for item in filter(None, spec[len(PREFIX) + 1:].split(",")):
        key, _, raw = item.partition("=")
        if key not in known:
            raise UsageError(f"tiny model: unknown option '{key}'", hint=f"Options: {', '.join(sorted(known))}.")
        try:
            values[key] = int(raw)
        except ValueError:
            raise UsageError(f"tiny model: '{key}' must be a whole number, got {raw!r}") from None
    return TinyConfig(**values)


_INDEX = {ch: i for i, ch in enumerate(ALPHABET)}


def encode(text: str) -> list[int]:
    return [_INDEX.get(ch, UNK) for ch in text]


def render_prompt(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str:
    head = f"<tools>{','.join(t.name for t in tools)}</tools>\n" if tools else ""
    return head + "".join(f"<|{m.role}|>\n{m.content}\n" for m in messages) + "<|assistant|>\n"


class TinyModel:
    """Weights and the two forward passes. Shapes: d = dim, H = heads, e = d / H, C = context."""

    def __init__(self, config: TinyConfig):
        import torch

        self.torch, self.config = torch, config
        gen = torch.Generator().manual_seed(config.seed)
        d = config.dim

        def weight(*shape: int, scale: float) -> Any:
            return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

        self.embed = weight(VOCAB, d, scale=1.0)
        self.position = weight(config.context, d, scale=0.3)
        self.blocks = [{"qkv": weight(d, 3 * d, scale=d ** -0.5), "out": weight(d, d, scale=d ** -0.5),
                        "up": weight(d, 4 * d, scale=d ** -0.5), "down": weight(4 * d, d, scale=(4 * d) ** -0.5)}
                       for _ in range(config.layers)]
        self.head = weight(d, VOCAB, scale=3 * d ** -0.5)

    def new_cache(self, slots: int) -> list[tuple[Any, Any]]:
        c = self.config
        shape = (slots, c.heads, c.context, c.dim // c.heads)
        return [(self.torch.zeros(shape, dtype=self.torch.float64), self.torch.zeros(shape, dtype=self.torch.float64))
                for _ in range(c.layers)]

    def prefill(self, cache: list[tuple[Any, Any]], slot: int, ids: list[int]) -> Any:
        """Run the prompt, fill ``slot`` of the cache; return the next-token logits [V]."""
        torch, c = self.torch, self.config
        n, heads, e = len(ids), c.heads, c.dim // c.heads
        x = self.embed[torch.tensor(ids)] + self.position[:n]  # [n, d]
        causal = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
        for block, (keys, values) in zip(self.blocks, cache):
            q, k, v = (_norm(x) @ block["qkv"]).view(n, 3, heads, e).permute(1, 2, 0, 3)  # each [H, n, e]
            keys[slot, :, :n], values[slot, :, :n] = k, v
            attn = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(e) + causal, dim=-1) @ v  # [H, n, e]
            x = x + attn.transpose(0, 1).reshape(n, c.dim) @ block["out"]
            x = x + torch.nn.functional.gelu(_norm(x) @ block["up"]) @ block["down"]
        return _norm(x[-1]) @ self.head

    def decode(self, cache: list[tuple[Any, Any]], slots: list[int], tokens: list[int], positions: list[int]) -> Any:
        """One step for b requests at once: token i sits at positions[i] of slot slots[i]. → logits [b, V]."""
        torch, c = self.torch, self.config
        b, heads, e = len(slots), c.heads, c.dim // c.heads
        slot_t, pos_t = torch.tensor(slots), torch.tensor(positions)
        span = max(positions) + 1
        hidden_mask = torch.arange(span)[None, :] > pos_t[:, None]  # [b, span]: later positions are not there yet
        x = self.embed[torch.tensor(tokens)] + self.position[pos_t]  # [b, d]
        for block, (keys, values) in zip(self.blocks, cache):
            q, k, v = (_norm(x) @ block["qkv"]).view(b, 3, heads, e).unbind(1)  # each [b, H, e]
            keys[slot_t, :, pos_t], values[slot_t, :, pos_t] = k, v
            past_k, past_v = keys[slot_t, :, :span], values[slot_t, :, :span]  # [b, H, span, e]
            scores = torch.einsum("bhe,bhte->bht", q, past_k) / math.sqrt(e)
            scores = scores.masked_fill(hidden_mask[:, None, :], float("-inf"))
            attn = torch.einsum("bht,bhte->bhe", torch.softmax(scores, dim=-1), past_v)
            x = x + attn.reshape(b, c.dim) @ block["out"]
            x = x + torch.nn.functional.gelu(_norm(x) @ block["up"]) @ block["down"]
        return _norm(x) @ self.head


def _norm(x: Any) -> Any:
    return x * (x.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt()


@dataclass
class _Row:
    slot: int
    position: int  # where the next token goes
    logits: Any
    params: GenerationParams
    prompt_tokens: int
    started: float
    generator: Any
    text: str = ""
    emitted: int = 0  # characters of ``text`` already sent (the rest may be the start of a stop string)
    generated: int = 0
    forwards: int = 1
    events: list[Event] = field(default_factory=list)


class TinySession:
    """Continuous batching over ``max_batch`` cache slots (see backends/batch.py for the contract)."""

    def __init__(self, model: TinyModel, max_batch: int):
        self.model = model
        self.cache = model.new_cache(max_batch)
        self.free = list(range(max_batch - 1, -1, -1))
        self.rows: dict[str, _Row] = {}

    def add(self, key: str, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> None:
        if params.json_schema is not None or params.tool_choice not in (None, "auto", "none"):
            # Its gibberish cannot be shaped into a call; "auto" and "none" only permit, so they pass.
            raise UsageError("the tiny test model cannot constrain its output (tool_choice required or a named "
                             "function, response_format json)", hint="Serve a model through the embedded engine, "
                             "e.g. --model clover-tiny.")
        ids = encode(render_prompt(messages, tools))
        window = self.model.config.context
        if len(ids) >= window:
            raise ContextTooLong(f"the prompt is {len(ids)} tokens; this model's context window is {window} tokens",
                                 prompt_tokens=len(ids), window=window)
        if not self.free:
            raise RuntimeError("tiny session: no free slot (the scheduler admitted more than max_batch)")
        slot = self.free.pop()
        torch = self.model.torch
        generator = torch.Generator().manual_seed(params.seed if params.seed is not None else int(time.time_ns() % 2**31))
        logits = self.model.prefill(self.cache, slot, ids)
        self.rows[key] = _Row(slot, len(ids), logits, params, len(ids), time.monotonic(), generator)

    def step(self) -> list[tuple[str, Event]]:
        events: list[tuple[str, Event]] = []
        going: list[tuple[str, _Row, int]] = []
        for key, row in list(self.rows.items()):
            token = _sample(self.model.torch, row.logits, row.params, row.generator)
            reason = self._advance(row, token)
            events.extend((key, event) for event in row.events)
            row.events.clear()
            if reason is None:
                going.append((key, row, token))
            else:
                events.extend((key, event) for event in self._finish(key, row, reason))
        if going:
            logits = self.model.decode(self.cache, [r.slot for _, r, _ in going], [t for _, _, t in going],
                                       [r.position for _, r, _ in going])
            for index, (_, row, _) in enumerate(going):
                row.logits, row.position, row.forwards = logits[index], row.position + 1, row.forwards + 1
        return events

    def remove(self, key: str) -> None:
        row = self.rows.pop(key, None)
        if row is not None:
            self.free.append(row.slot)

    def close(self) -> None:
        self.rows.clear()

    def _advance(self, row: _Row, token: int) -> str | None:
        """Take one sampled token; queue the text that is safe to send; say why the row ends, if it does."""
        if token == EOS:
            return "stop"
        row.text += ALPHABET[token] if token < len(ALPHABET) else "\ufffd"
        row.generated += 1
        for stop in row.params.stop:
            if row.text.endswith(stop):
                row.text = row.text[: -len(stop)]
                return "stop"
        keep = max((n for stop in row.params.stop for n in range(1, len(stop)) if row.text.endswith(stop[:n])), default=0)
        if len(row.text) - keep > row.emitted:
            row.events.append(TextDelta(row.text[row.emitted: len(row.text) - keep]))
            row.emitted = len(row.text) - keep
        if row.generated >= row.params.max_new_tokens or row.position + 1 >= self.model.config.context:
            return "length"
        return None

    def _finish(self, key: str, row: _Row, reason: str) -> list[Event]:
        self.remove(key)
        out: list[Event] = [TextDelta(row.text[row.emitted:])] if len(row.text) > row.emitted else []
        return out + [Usage(row.prompt_tokens, row.generated, forwards=row.forwards, seconds=time.monotonic() - row.started),
                      Finish(reason)]


def _sample(torch: Any, logits: Any, params: GenerationParams, generator: Any) -> int:
    if params.temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        probs = nucleus(probs, params.top_p)
    return int(torch.multinomial(probs, 1, generator=generator))


class TinyBackend:
    """The model protocol (one request at a time) plus ``open_batch`` for ``clovercode serve``."""

    batch_constraints = True  # its sessions take tool_choice themselves (refusing what they cannot enforce)

    def __init__(self, config: TinyConfig | None = None):
        try:
            import torch
        except ImportError:
            raise ModelUnavailable("the tiny model needs PyTorch, which is not installed",
                                   hint="Install the engine extra: pip install 'clovercode[engine]'.") from None

        # Matrices this small only pay synchronisation for extra threads, and on a shared machine
        # they oversubscribe the cores (measured: 25x slower with 2 threads under load).
        torch.set_num_threads(1)
        self.config = config or TinyConfig()
        self.model = TinyModel(self.config)
        self.name = "tiny"
        self.context_window = self.config.context

    def count_tokens(self, text: str) -> int:
        return len(text)

    def open_batch(self, max_batch: int) -> TinySession:
        return TinySession(self.model, max_batch)

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        session = TinySession(self.model, 1)
        session.add("only", messages, tools, params)
        while True:
            for _, event in session.step():
                yield event
                if isinstance(event, Finish):
                    return

    def close(self) -> None:
        pass

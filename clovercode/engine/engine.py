"""The engine facade: one loaded model + tokenizer, decoding plans, and generation with streaming."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from rich.console import Console

from clovercode.engine.batchseam import BatchDenoiser
from clovercode.engine import fastpaths
from clovercode.engine.config import EngineConfig
from clovercode.engine.constraint import Constraint, GrammarCompiler, Steering
from clovercode.engine.decoder import DecodePlan, DecodeResult, PassEvent, decode_stream
from clovercode.engine.denoiser import CachedDenoiser, Denoiser, mask_is_honoured
from clovercode.engine.loading import ModelInfo, load
from clovercode.engine.quiet import library_noise
from clovercode.engine.sources import cache_root, resolve
from clovercode.engine.stops import Stops
from clovercode.ground.errors import ModelUnavailable


class NotDiffusionCapable(ModelUnavailable):
    """Block diffusion was asked of a model that cannot do it."""


@dataclass
class Engine:
    model: Any
    tokenizer: Any
    info: ModelInfo
    config: EngineConfig
    mask_checked: bool | None = field(default=None, repr=False)  # does the model honour 4D masks?
    shared: Denoiser | None = field(default=None, repr=False)  # keeps the last prompt's cache
    grammars: GrammarCompiler | None = field(default=None, repr=False)  # built at the first constrained turn
    console: Console | None = field(default=None, repr=False)  # where notes go (stderr when None)
    notes: list[str] = field(default_factory=list, repr=False)  # fast paths skipped, each said once
    filler: frozenset[int] | None = field(default=None, repr=False)  # pad and mask ids: never text
    # The memory plan's context limits (engine/memory.py), read once the weights are loaded: one for a
    # batch-1 sequence, one for a slot of a server's batch. None: not planned (a bare engine in tests).
    limits: dict[str, Any] | None = field(default=None, repr=False)
    batched: bool = field(default=False, repr=False)  # a server's slots decode here: their limit applies

    @classmethod
    def open(cls, spec: str, config: EngineConfig, console: Console | None = None, base_dir: Path | None = None,
             env: Mapping[str, str] | None = None, cache_dir: str = "", noise_log: Path | None = None) -> "Engine":
        """Resolve ``spec`` (alias, directory, repo id, .gguf), load it, and check the block size it will use.
        What the libraries say while it loads goes to ``noise_log`` (dropped without one; quiet.py)."""
        env = os.environ if env is None else env
        source = resolve(spec, base_dir)
        console = console or Console(stderr=True)
        try:
            import torch  # noqa: F401 - first: its logging set-up must come before the noise is held back
        except ImportError:
            pass  # load() says what to install
        with library_noise(noise_log) as noise:
            model, tokenizer, info = load(source, config, console, cache_root(env, cache_dir))
        for line in noise.summary(info.device):
            console.print(line, highlight=False, markup=False)
        engine = cls(model, tokenizer, info, config, console=console)
        why = fastpaths.refusal(model)
        if why is not None:
            engine.note(fastpaths.skipped("index-written cache", why))
        engine.plan()  # fail now, not at the first turn, if the model cannot decode as configured
        engine.limits = engine.plan_limits()
        alone = engine.limits["single"]
        if alone is not None and alone.positions == 0:  # loaded, but not one chunk of context fits beside it
            engine.close()
            raise ModelUnavailable(f"not enough memory to run {engine.name}: {alone.describe()}",
                                   hint=f"Quantized weights: {alone.advice(1)}; or free device memory.")
        return engine

    def plan_limits(self) -> dict[str, Any]:
        """The memory plan's limit for one sequence alone and for a slot of a batch, for the memory
        free now (after the weights): a prompt over it is refused before it runs (docs/engine.md)."""
        from clovercode.engine.memory import context_limit

        block = self.block_size()
        return {kind: context_limit(self.model, self.name, self.info.device, self.config, block, self.context_window,
                                    single=kind == "single") for kind in ("single", "slot")}

    def context_limit(self) -> Any:
        """The applied limit (memory.ContextLimit) of the way this engine decodes now; None: unplanned."""
        if not self.limits:
            return None
        return self.limits["slot" if self.batched else "single"]

    def note(self, text: str) -> None:
        """Say once that a fast path does not apply, and why (a slow path is never taken silently)."""
        if text in self.notes:
            return
        self.notes.append(text)
        (self.console or Console(stderr=True)).print(f"note: {text}", highlight=False, markup=False)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def context_window(self) -> int:
        return self.info.context_window

    @property
    def max_context(self) -> int:
        """The most positions one request may hold: engine.max_context, else (and at most) the window,
        and at most what the memory plan holds on this device (:meth:`context_limit`)."""
        window, limit = self.context_window, self.config.max_context
        wanted = min(limit, window) if limit and window else (limit or window)
        planned = self.context_limit()
        return wanted if planned is None else min(wanted, planned.positions)

    def memory_plan(self, slots: int) -> Any:
        """The memory plan (engine/memplan.py) for ``slots`` batched sequences; None for a model whose
        config does not say its shape."""
        from clovercode.engine.memory import engine_plan
        from clovercode.engine.memplan import PlanError
        from clovercode.ground.errors import ConfigError

        try:
            return engine_plan(self.model, self.name, self.info.device, self.config, slots, self.block_size(),
                               self.max_context if self.context_limit() is not None and self.max_context
                               else self.context_window)
        except PlanError as exc:
            raise ConfigError(str(exc), hint="See docs/engine.md (The memory plan).") from None

    def block_size(self, requested: int | None = None) -> int:
        """The block size to use: requested, else configured, else the model's own (1 for AR models)."""
        size = requested or self.config.block_size or self.info.block_size or (32 if self.info.diffusion_capable else 1)
        if size > 1:
            if not self.info.diffusion_capable and self.config.mask_token_id is None:
                raise NotDiffusionCapable(
                    f"model {self.name} is autoregressive (it has no mask token), so it cannot decode blocks of {size}",
                    hint="Use a diffusion-capable model such as clover, or set engine.block_size = 0 (auto) or 1 "
                    "to run this one autoregressively.")
            if self.info.sliding_window:
                raise NotDiffusionCapable(f"model {self.name} uses sliding-window attention, which the block "
                                          "diffusion engine does not support", hint="Set engine.block_size = 1.")
            if not self._mask_ok():
                raise NotDiffusionCapable(f"model {self.name} ignores custom attention masks, so it cannot attend "
                                          "bidirectionally within a block", hint="Set engine.block_size = 1.")
        return size

    def _mask_ok(self) -> bool:
        if self.mask_checked is None:
            self.mask_checked = mask_is_honoured(self.model)
        return self.mask_checked

    def plan(self, **overrides: Any) -> DecodePlan:
        """A decoding plan from the config, with per-call ``overrides`` (e.g. temperature, block_size)."""
        cfg = self.config.with_(**{k: v for k, v in overrides.items() if k != "block_size"}) if overrides else self.config
        size = self.block_size(overrides.get("block_size"))
        mask = cfg.mask_token_id if cfg.mask_token_id is not None else self.info.mask_token_id
        shift = cfg.logit_shift if cfg.logit_shift is not None else self.info.logit_shift
        return DecodePlan(block_size=size, mask_id=mask, logit_shift=shift, strategy=cfg.strategy,
                          threshold=cfg.threshold, top_k=cfg.top_k, steps=cfg.steps, temperature=cfg.temperature,
                          top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens kept (``<think>``, ``<tool_call>`` may be special) except
        pad and mask tokens: filler a sampled block may hold, never text."""
        filler = self._filler_ids()
        return self.tokenizer.decode([i for i in ids if i not in filler], skip_special_tokens=False)

    def _filler_ids(self) -> frozenset[int]:
        filler = self.filler
        if filler is None:
            candidates = {getattr(self.tokenizer, "pad_token_id", None), self.config.mask_token_id,
                          getattr(self.info, "mask_token_id", None)}
            filler = self.filler = frozenset(i for i in candidates if isinstance(i, int)) - set(self.info.eos_ids)
        return filler

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def stops(self, strings: Sequence[str] = (), keep_string: bool = True) -> Stops:
        return Stops(self.info.eos_ids, tuple(strings), keep_string)

    def constraint(self, grammar: str, steering: Steering | None = None, scope: str = "") -> Constraint:
        """``grammar`` (llguidance Lark text, :mod:`clovercode.engine.grammar`) compiled for this
        tokenizer; ``steering``: see :class:`Steering`; ``scope``: see ``GrammarCompiler.constraint``."""
        return self.grammar_compiler().constraint(grammar, steering, scope)

    def grammar_compiler(self) -> GrammarCompiler:
        if self.grammars is None:
            vocab = int(getattr(self.model.config, "vocab_size", 0) or len(self.tokenizer))
            self.grammars = GrammarCompiler(self.tokenizer, max(vocab, len(self.tokenizer)), self.info.eos_ids)
        return self.grammars

    def denoiser(self) -> Denoiser:
        """The engine's own denoiser: it reuses the previous prompt's cache when a prompt extends it."""
        if self.shared is None:
            self.shared = self._new_denoiser()
        return self.shared

    def _new_denoiser(self) -> Denoiser:
        """engine.compile: a static cache with CUDA graphs (engine/graphs.py), else the dynamic cache."""
        limit = self.sequence_tokens()
        if self.config.compile == "off" or (self.config.compile == "auto" and not self.info.device.startswith("cuda")):
            return CachedDenoiser(self.model, reuse_prompt=True, keep_tokens=self.config.prompt_cache_tokens, limit=limit)
        from clovercode.engine.graphs import StaticDenoiser, wants_graphs

        return StaticDenoiser(self.model, graphs=self._graphs(wants_graphs(self.config.compile, self.info.device)),
                              reuse_prompt=True,
                              keep_tokens=self.config.prompt_cache_tokens, note=self.note, limit=limit)

    def _graphs(self, wanted: bool) -> bool:
        """Whether passes are captured as CUDA graphs: ``wanted``, unless the model cannot be (said once)."""
        why = fastpaths.graph_refusal(self.model) if wanted and self.info.device.startswith("cuda") else None
        if why is not None:
            self.note(fastpaths.skipped("CUDA graphs", why))
        if wanted and why is None:
            fastpaths.prepare_graphs(self.model)
        return wanted and why is None

    def sequence_tokens(self) -> int | None:
        """The most positions one sequence's cache may hold: the memory plan's slot tokens (max context
        and a block, in whole chunks); None when no context limit is known. The batch-1 cache refuses to
        grow past it (CacheFull), as a slot does; requests are held to max context before that."""
        from clovercode.engine.memplan import round_up

        if self.info is None or not self.max_context:
            return None
        try:
            block = self.block_size()
        except NotDiffusionCapable:  # decoding refuses this config itself; a token at a time meanwhile
            block = 1
        return round_up(self.max_context + block)

    def stream(self, prompt: Sequence[int], plan: DecodePlan, stops: Stops, seed: int | None = None,
               on_pass: Callable[[PassEvent], None] | None = None, denoiser: Denoiser | None = None,
               constraint: Constraint | None = None) -> Iterator[str | DecodeResult]:
        """Yield text as each block commits, then the DecodeResult. With a ``constraint`` (from
        :meth:`constraint`) every token follows its grammar."""
        return decode_stream(denoiser or self.denoiser(), prompt, plan, self.detokenize, stops,
                             on_pass=on_pass, generator=self.generator(plan, seed), constraint=constraint)

    def generator(self, plan: DecodePlan, seed: int | None = None) -> Any:
        """A request's own torch.Generator when it samples (None when greedy): an unseeded turn must
        not reseed torch's global one, and a batched request must draw what it draws alone."""
        import torch

        if plan.temperature <= 0:
            return None
        generator = torch.Generator(device=self.info.device)
        if seed is not None:
            generator.manual_seed(seed)
        else:
            generator.seed()
        return generator

    def batch_denoiser(self, capacity: int) -> BatchDenoiser:
        """A denoiser for ``capacity`` sequences at once (continuous batching). The one place that
        picks it: the slot-cache denoiser (one forward for every row) when it takes this model's
        cache, else the serial reference (correct, but no faster than one request at a time), with a note
        that says why. With ``engine.compile`` the slot forwards run per batch-size bucket, replayed as
        CUDA graphs on CUDA (engine/batchgraphs.py)."""
        from clovercode.engine.serialbatch import SerialBatchDenoiser

        try:
            from clovercode.engine.batchcache import UnsupportedCache
            from clovercode.engine.batchdenoiser import SlotBatchDenoiser
        except ImportError as exc:
            self.note(fastpaths.skipped("slot batching", f"{exc.name or 'a module'} is not importable"))
            return SerialBatchDenoiser(self.model, capacity)
        self.batched = True  # the slots' limit holds from now on (the batch-1 path shares the device)
        plan = self.memory_plan(capacity) if self.info is not None else None  # (tests build bare engines)
        try:
            batched = SlotBatchDenoiser(self.model, capacity, keep_tokens=self.config.prompt_cache_tokens,
                                        slot_tokens=plan.slot_tokens if plan is not None else None)
        except UnsupportedCache as exc:
            why = fastpaths.refusal(self.model)
            self.note(fastpaths.skipped("slot batching", str(exc) + (f"; {why}" if why else "")))
            return SerialBatchDenoiser(self.model, capacity)
        from clovercode.engine.graphs import wants_graphs

        if self.config.compile != "off" and wants_graphs(self.config.compile, self.info.device):
            from clovercode.engine.batchgraphs import GraphedBatch

            return GraphedBatch(batched, graphs=self._graphs(self.info.device.startswith("cuda")), note=self.note)
        return batched

    def forget_prompts(self, scope: str | None = None) -> None:
        """Drop the prompts kept for reuse (the next prompt of every conversation is prefilled whole):
        all, or those of the cache scopes starting with ``scope``."""
        forget = getattr(self.shared, "forget_prompts", None)
        if forget is not None:
            forget(scope)

    def generate(self, prompt: Sequence[int], plan: DecodePlan, stops: Stops, **kwargs: Any) -> DecodeResult:
        result = None
        for item in self.stream(prompt, plan, stops, **kwargs):
            if isinstance(item, DecodeResult):
                result = item
        assert result is not None
        return result

    def close(self) -> None:
        import gc

        self.model = self.shared = None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover
            pass

"""The denoiser seam: prefill(prompt) → state; denoise(state, block) → logits, leaving committed state
untouched; commit(state, block) → state advanced by the block.

``CachedDenoiser`` adapts any transformers causal LM whose forward takes a 4D attention mask and a
cache: attention-only models (Llama, Qwen3, SmolLM2), hybrid Gated-DeltaNet models (Qwen3.5/3.6,
Qwen3-Next: their recurrent and conv state is snapshotted and restored around each denoising pass)
and remote-code models (the cache argument's name is read from the forward signature, unknown cache
classes are snapshotted by value). ``RecomputeDenoiser`` keeps no cache and recomputes the whole
sequence every pass: the exactness reference and the "recompute" side of the benchmark.

Attention semantics (docs/engine.md): committed tokens are causal; a block being denoised sees all
committed tokens and, in attention layers, every position of its own block. Linear-attention layers
are recurrences and see the block causally, from the committed state; the reference recomputes with
exactly these semantics.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from clovercode.engine import cachestate, fastpaths, masks, memplan


class Denoiser(Protocol):
    def prefill(self, ids: Sequence[int]) -> Any:
        """Process the prompt; the state's ``last_logits`` (V,) predict the first new token."""

    def denoise(self, state: Any, block: Any) -> Any:
        """Logits (B, V) for a (B,) block of token ids (some of them mask tokens)."""

    def commit(self, state: Any, block: Any) -> Any:
        """Append the finished block to the committed state; update ``last_logits``."""


def enter_scope(denoiser: Any, scope: str) -> None:
    """Make ``scope`` the prompt-cache namespace of ``denoiser``'s next prefills (see
    ``CachedDenoiser``); a denoiser that keeps no prompts has none to set."""
    if hasattr(denoiser, "scope"):
        denoiser.scope = scope


NONCAUSAL = "noncausal"  # CachedDenoiser's block "mask": none, with the attention told not to be causal
PROBED = "_clovercode_noncausal"  # the model attribute that keeps the probe's answer


def layer_kinds(model: Any) -> list[str]:
    """The attention kinds a model's forward keys its per-layer masks by (``config.layer_types``)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return sorted(set(getattr(config, "layer_types", None) or ["full_attention"]))


def _vocab_size(model: Any) -> int:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(config.vocab_size)


@dataclass
class CachedState:
    cache: Any
    length: int  # committed tokens
    last_logits: Any  # (V,)
    snap: cachestate.Snapshot | None = None  # taken before the first denoising pass of a block
    mask: Any = None  # the block's attention mask, made on the device at its first denoising pass


def model_dtype(model: Any) -> Any:
    """The dtype activations run in: that of the first floating-point parameter."""
    import torch

    return next((p.dtype for p in model.parameters() if p.dtype.is_floating_point), torch.float32)


def forward_kwargs(model: Any) -> dict[str, str | bool]:
    """How this model's forward wants its cache and logit slicing (remote code may predate 5.x names)."""
    params = inspect.signature(model.forward).parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    cache_name = "cache" if "cache" in params or ("past_key_values" not in params and accepts_any) else "past_key_values"
    return {"cache": cache_name, "logits_to_keep": "logits_to_keep" in params}


@dataclass
class PromptCheckpoint:
    """A cache as it was right after a prefill, to reuse when a later prompt extends that prompt."""

    ids: list[int]
    cache: Any
    snap: cachestate.Snapshot
    last_logits: Any
    scope: str = ""  # the namespace it was prefilled in: only a prefill in the same one reuses it


class CachedDenoiser:
    """Prefix-cached denoiser over a transformers model (batch 1).

    With ``reuse_prompt`` a prefill whose prompt starts with a kept prompt restores that prompt's cache
    to where it ended and processes only the new tokens: agent turns grow the prompt, and a server
    interleaves several conversations. The last prompt is always kept; older ones while all kept
    prompts together hold at most ``keep_tokens`` tokens and number at most ``keep_prompts`` (each
    costs its cache's memory, and a hybrid model's prompt its whole linear-attention state however
    short it is), least recently used going first: reuse only saves work, so evicting is always safe.
    ``limit`` (the memory plan's positions for one sequence; None: unbounded) refuses a prefill or
    pass that would take the cache past it with ``CacheFull``, before anything is allocated or
    changed. A checkpoint whose cache a later prompt extended is replaced by that
    prompt's: one cache object has one owner. ``scope`` (an opaque string, set before a prefill)
    names the namespace prompts are kept and reused in: a prompt kept in one scope is invisible to
    a prefill in another (``serve`` sets one per API key, so a reply's cached tokens cannot tell one
    client what another sent)."""

    def __init__(self, model: Any, reuse_prompt: bool = False, keep_tokens: int = 0,
                 keep_prompts: int | None = None, limit: int | None = None):
        self.model = model
        self.reuse_prompt = reuse_prompt
        self.keep_tokens = keep_tokens
        self.keep_prompts = max(1, keep_prompts if keep_prompts is not None else memplan.kept_prompts(keep_tokens))
        self.limit = limit
        self.checkpoints: list[PromptCheckpoint] = []  # least recently used first
        self.reused_tokens = 0  # prompt tokens the last prefill took from a checkpoint
        self.scope = ""  # the namespace of the next prefills' kept prompts (enter_scope)
        # Library models get a cache written by index; remote code may need its own cache class, unless
        # its class declares the engine's cache contract (engine/fastpaths.py)
        self.own_cache = fastpaths.keeps_contract(model)
        self.device = next(model.parameters()).device
        self.dtype = model_dtype(model)
        kwargs = forward_kwargs(model)
        self.cache_arg, self.slices_logits = str(kwargs["cache"]), bool(kwargs["logits_to_keep"])
        self.layout = "unknown"
        self.noncausal: bool | None = None  # may a denoising pass run with no mask, non-causal? (probed once)

    def _run(self, ids: Any, start: int, mask: Any, cache: Any, keep_last: bool) -> tuple[Any, Any]:
        """One forward. ``mask`` (additive, on the device) None means plain causal attention: the model
        builds that mask itself, so prefill and commit passes run exactly the kernels ``generate`` runs."""
        import torch

        self._room(start + len(ids))
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device).view(1, -1)
        positions = torch.arange(start, start + ids.shape[1], device=self.device)[None]
        kwargs: dict[str, Any] = {self.cache_arg: cache, "use_cache": True}
        if keep_last and self.slices_logits:
            kwargs["logits_to_keep"] = 1
        if mask is NONCAUSAL:  # every layer without a mask, attention told not to be causal
            mask, kwargs["is_causal"] = {kind: None for kind in layer_kinds(self.model)}, False
        with torch.no_grad():
            out = self.model(input_ids=ids, position_ids=positions, attention_mask=mask, **kwargs)
        new_cache = getattr(out, "cache", None)
        if new_cache is None:
            new_cache = getattr(out, "past_key_values", None)
        return out.logits[0], new_cache if new_cache is not None else cache

    def prefill(self, ids: Sequence[int]) -> CachedState:
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError("the prompt is empty: there is nothing to predict the first token from")
        self._room(len(ids))  # before a kept prompt is taken out of the list
        point = self._extended(ids)
        self.reused_tokens = 0
        if point is not None:
            self.checkpoints.remove(point)
            cachestate.restore(point.cache, point.snap)
            cache, start, last = point.cache, len(point.ids), point.last_logits
            self.reused_tokens = start
        else:
            if self.keep_tokens == 0:  # no older prompts are kept: let the last go before a new cache is made
                self.checkpoints = [p for p in self.checkpoints if p.scope != self.scope]
            cache, start, last = self.new_cache(), 0, None
        # in pieces, each extending the cache the last left, so activations are a piece's (memplan.PREFILL_CHUNK)
        for piece in range(start, len(ids), memplan.PREFILL_CHUNK):
            logits, cache = self._run(ids[piece:piece + memplan.PREFILL_CHUNK], piece, None, cache, True)
            last = logits[-1].float()
        self.layout = cachestate.layout(cache)
        self.keep(ids, cache, last)
        return CachedState(cache, len(ids), last)

    def keep(self, ids: Sequence[int], cache: Any, last_logits: Any) -> None:
        """Keep ``cache`` (``ids`` prefilled, nothing after) as the newest checkpoint, within the budget."""
        if not self.reuse_prompt:
            return
        self.checkpoints.append(PromptCheckpoint(list(ids), cache, cachestate.snapshot(cache), last_logits, self.scope))
        kept = sum(len(point.ids) for point in self.checkpoints)
        while len(self.checkpoints) > 1 and (kept > self.keep_tokens or len(self.checkpoints) > self.keep_prompts):
            kept -= len(self.checkpoints.pop(0).ids)

    def _room(self, needed: int) -> None:
        """Refuse a forward that would hold more than ``limit`` positions (checked before the forward:
        a hybrid's linear layers update their states in place before an attention layer could object)."""
        if self.limit is not None and needed > self.limit:
            raise memplan.CacheFull(f"a sequence of {needed:,} positions does not fit the batch-1 cache's "
                                    f"{self.limit:,} (the memory plan's positions for one sequence, engine.max_context)")

    @property
    def checkpoint(self) -> PromptCheckpoint | None:
        """The most recent prompt's checkpoint."""
        return self.checkpoints[-1] if self.checkpoints else None

    def reusable(self, ids: Sequence[int]) -> int:
        """How many of ``ids`` a prefill would take from a checkpoint."""
        point = self._extended([int(t) for t in ids])
        return len(point.ids) if point is not None else 0

    def forget_prompts(self, scope: str | None = None) -> None:
        """Drop the kept prompts: all, or those of the scopes starting with ``scope`` (one tenant's)."""
        self.checkpoints[:] = [] if scope is None else [p for p in self.checkpoints if not p.scope.startswith(scope)]

    def _extended(self, ids: list[int]) -> PromptCheckpoint | None:
        """The checkpoint of this scope with the longest prompt that ``ids`` starts with (None when reuse
        is off)."""
        if not self.reuse_prompt:
            return None
        extended = [point for point in self.checkpoints if point.scope == self.scope and ids[:len(point.ids)] == point.ids]
        return max(extended, key=lambda point: len(point.ids), default=None)

    def new_cache(self) -> Any:
        """An empty cache of the kind prefill fills (None: the model makes its own)."""
        if not self.own_cache:
            return None
        from clovercode.engine.kvbuffer import buffered_cache

        return buffered_cache(self.model.config)

    def denoise(self, state: CachedState, block: Any) -> Any:
        if state.snap is None:
            state.snap = cachestate.snapshot(state.cache)
            state.mask = self._block_mask(state.length, len(block))
        try:
            logits, _ = self._run(block, state.length, state.mask, state.cache, False)
        finally:
            cachestate.restore(state.cache, state.snap)
        return logits.float()

    def _block_mask(self, prefix: int, rows: int) -> Any:
        """What a denoising pass attends with: no mask at all where the model runs its attention
        non-causally on request (flash kernels stay usable), else the all-zeros mask, on the device."""
        if self.noncausal is None:
            # Kept on the model, which it describes: a denoiser is made per request in places.
            self.noncausal = getattr(self.model, PROBED, None)
            if self.noncausal is None:
                self.noncausal = self._probe_noncausal()
                setattr(self.model, PROBED, self.noncausal)
        return NONCAUSAL if self.noncausal else masks.full_block(prefix, rows, self.dtype, self.device)

    def _probe_noncausal(self) -> bool:
        """Does a block pass with no mask and ``is_causal=False`` give what the all-zeros mask gives?
        Checked on a short prompt through the real cache path; its difference from the zeros mask
        must be a hundredth of the causal pass's (so any dtype's rounding passes, a causal one not)."""
        import torch

        vocab = _vocab_size(self.model)
        prompt, block = [i % vocab for i in (1, 2, 3)], [i % vocab for i in (4, 5, 6)]
        try:
            outs = []
            for mask in (masks.full_block(3, 3, self.dtype, self.device), NONCAUSAL, None):
                _, cache = self._run(prompt, 0, None, self.new_cache(), True)
                outs.append(self._run(block, 3, mask, cache, False)[0].float())
        except Exception:  # a model whose forward takes no per-kind masks or no is_causal: keep the mask
            return False
        full, flag, causal = outs
        return bool((flag - full).abs().max() <= 0.01 * (causal - full).abs().max())

    def commit(self, state: CachedState, block: Any) -> CachedState:
        state.snap = state.mask = None
        logits, state.cache = self._run(block, state.length, None, state.cache, keep_last=True)
        state.length += len(block)
        state.last_logits = logits[-1].float()
        return state


@dataclass
class RecomputeState:
    ids: list[int]
    last_logits: Any

    @property
    def length(self) -> int:
        return len(self.ids)


class RecomputeDenoiser:
    """No cache: every pass runs the model over everything committed plus the block."""

    def __init__(self, model: Any):
        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = model_dtype(model)

    def _logits(self, ids: list[int], allowed: Any) -> Any:
        import torch

        tensor = torch.tensor(ids, dtype=torch.long, device=self.device)[None]
        positions = torch.arange(len(ids), device=self.device)[None]
        with torch.no_grad():
            out = self.model(input_ids=tensor, position_ids=positions,
                             attention_mask=masks.additive(allowed.to(self.device), self.dtype), use_cache=False)
        return out.logits[0].float()

    def prefill(self, ids: Sequence[int]) -> RecomputeState:
        ids = list(ids)
        return RecomputeState(ids, self._logits(ids, masks.causal_rows(0, len(ids)))[-1])

    def denoise(self, state: RecomputeState, block: Any) -> Any:
        size = len(block)
        full = state.ids + [int(t) for t in block]
        return self._logits(full, masks.reference_rows(state.length, size))[state.length:]

    def commit(self, state: RecomputeState, block: Any) -> RecomputeState:
        state.ids = state.ids + [int(t) for t in block]
        state.last_logits = self._logits(state.ids, masks.causal_rows(0, len(state.ids)))[-1]
        return state


def mask_is_honoured(model: Any) -> bool:
    """Whether a custom 4D mask changes the model's output (block diffusion depends on it)."""
    import torch

    device = next(model.parameters()).device
    dtype = model_dtype(model)
    vocab = model.config.get_text_config().vocab_size if hasattr(model.config, "get_text_config") else model.config.vocab_size
    ids = torch.tensor([[1 % vocab, 2 % vocab, 3 % vocab]], device=device)
    positions = torch.arange(3, device=device)[None]
    outs = []
    for allowed in (masks.causal_rows(0, 3), masks.block_rows(0, 3)):
        with torch.no_grad():
            outs.append(model(input_ids=ids, position_ids=positions, use_cache=False,
                              attention_mask=masks.additive(allowed.to(device), dtype)).logits[0, 0].float())
    return not torch.allclose(outs[0], outs[1])

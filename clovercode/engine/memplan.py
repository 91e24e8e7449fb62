"""The memory plan: how many sequences of how many tokens the KV cache can hold on a device, decided
once from a token budget instead of discovered by doubling buffers until the device runs out.

Pure arithmetic over a model's shape (no torch, no weights): ``scripts/gpu_check.sh --plan-only`` prints
Clover's plan on a machine without a GPU, and the engine plans its slot cache with the same numbers.

What a plan counts (docs/engine.md, "The memory plan"):
* weights: the model's parameters in its dtype;
* KV cache: ``slots × slot_tokens`` positions, each ``kv_bytes_per_token`` (keys and values of every
  full-attention layer); a hybrid model's linear-attention layers (Gated DeltaNet) add a fixed state per
  sequence, whatever its length;
* kept prompts: the checkpoints a later turn extends (``engine.prompt_cache_tokens`` older prompt tokens,
  and the last prompt, up to ``max_context``, always kept), at most ``KEPT_PROMPTS`` of them, each with
  its own linear-attention state and up to a chunk of spare buffer;
* the largest transient, of whichever moment needs more: admitting a prompt (its batch-1 prefill:
  activations plus its own cache before the copy into a slot) or a batched pass (attention scores,
  logits, and one layer's buffers twice while the slot cache grows by a chunk);
* a fixed runtime reserve (CUDA context, allocator slack).

vLLM's ``gpu_memory_utilization`` idea: only ``utilisation`` of the free device memory is planned at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Mapping

GiB = 2 ** 30
# Buffers grow by whole chunks of this many positions (never by doubling): small enough that a chunk
# of slack is cheap, large enough that growing is rare (one copy per chunk of generated tokens).
CHUNK_TOKENS = 512
RUNTIME_RESERVE = GiB  # CUDA context, cuBLAS workspaces, allocator slack
# Hidden-size vectors alive per prompt token during a prefill: the residual, norms, q/k/v, and the MoE's
# routed copies (one per expert a token goes to, in and out); an estimate, deliberately generous.
PREFILL_VECTORS = 8
# A batch-1 prefill runs the prompt through the model this many positions at a time (each piece extends
# the cache the last one left, as a later turn extends a kept prompt), so its activations are a piece's,
# not the whole prompt's (6 GiB of Clover's at 64K); a later piece attends to the whole prefix through a
# materialised causal mask (piece × prefix), counted too. SGLang's chunked prefill on small cards: 2048.
PREFILL_CHUNK = 2048
# The most prompts kept for reuse at once, the last included (CachedDenoiser evicts the oldest past it,
# as well as past engine.prompt_cache_tokens). Each carries a hybrid model's whole linear-attention state
# (Clover: ≈ 62 MB), whatever its length, so a token budget alone would not bound many short prompts.
# A server interleaves a handful of conversations; 16 keeps them all for about 1 GB of Clover's states.
KEPT_PROMPTS = 16
SCORE_BYTES = 4  # attention scores and logits are float32 where they are materialised
CLOVER_CONFIG = "clover-35b-a3b.json"


class PlanError(ValueError):
    """A plan that cannot be made (a bad figure, or nothing fits)."""


class CacheFull(ValueError):
    """A sequence would need more positions than the plan gave it (a slot's, or the batch-1 cache's)."""


@dataclass(frozen=True)
class ModelShape:
    """What a model's memory depends on, read from its config."""

    name: str
    layers: int
    full_layers: int  # layers with a KV cache
    q_heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    experts_per_token: int  # 0 for a dense model
    dtype_bytes: int
    linear_layers: int  # Gated DeltaNet layers: a fixed state per sequence
    linear_state_bytes: int  # per sequence, every linear layer together
    weights_bytes: int
    context_window: int

    @property
    def kv_bytes_per_token(self) -> int:
        return self.full_layers * 2 * self.kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True)
class MemoryPlan:
    shape: ModelShape
    slots: int  # sequences decoded together
    slot_tokens: int  # positions each slot holds (max_context and one block, rounded up to a chunk)
    max_context: int  # the most positions one request may hold (prompt, reply and its last block)
    free_bytes: int  # device memory free before the weights
    utilisation: float
    block: int
    kept_prompt_tokens: int
    requested_slots: int
    kept_prompts: int  # how many prompts may be kept at once (KEPT_PROMPTS; 1 with no older-prompt budget)
    transients: dict[str, int] = field(default_factory=dict)
    single: bool = False  # one sequence decoded in its own prefilled cache (the REPL, fix): no slot copy

    @property
    def capacity_tokens(self) -> int:
        return self.slots * self.slot_tokens

    @property
    def kv_bytes(self) -> int:
        return self.capacity_tokens * self.shape.kv_bytes_per_token

    @property
    def linear_bytes(self) -> int:
        return self.slots * self.shape.linear_state_bytes

    @property
    def kept_bytes(self) -> int:
        # each kept prompt: its own linear state, and its buffers' spare positions (under one chunk)
        per_prompt = self.shape.linear_state_bytes + CHUNK_TOKENS * self.shape.kv_bytes_per_token
        return self.kept_prompt_tokens * self.shape.kv_bytes_per_token + self.kept_prompts * per_prompt

    @property
    def transient_bytes(self) -> int:
        prefill = self.transients.get("prefill activations", 0) + self.transients.get("admitted prompt's own cache", 0)
        step = sum(v for k, v in self.transients.items() if k.startswith("pass "))
        return max(prefill, step)

    @property
    def usable_bytes(self) -> int:
        return int(self.free_bytes * self.utilisation)

    @property
    def peak_bytes(self) -> int:
        return (self.shape.weights_bytes + self.kv_bytes + self.linear_bytes + self.kept_bytes
                + self.transient_bytes + RUNTIME_RESERVE)

    @property
    def headroom_bytes(self) -> int:
        return self.usable_bytes - self.peak_bytes

    @property
    def fits(self) -> bool:
        return self.slots >= 1 and self.headroom_bytes >= 0

    def lines(self) -> list[str]:
        """The plan as text, one figure a line; the last line is ``planned peak GiB: X``."""
        s = self.shape
        out = [f"memory plan for {s.name}: {s.layers} layers ({s.full_layers} full attention, {s.linear_layers} "
               f"linear attention), {s.q_heads} query / {s.kv_heads} KV heads of {s.head_dim}, {s.dtype_bytes}-byte dtype",
               f"KV bytes per token: {s.kv_bytes_per_token:,} ({s.full_layers} layers × 2 × {s.kv_heads} heads × "
               f"{s.head_dim} × {s.dtype_bytes} B)",
               f"slots: {self.slots} (asked {self.requested_slots}) × {self.slot_tokens:,} tokens = capacity "
               f"{self.capacity_tokens:,} tokens (max context {self.max_context:,})",
               f"weights: {_gib(s.weights_bytes)} GiB",
               f"KV cache: {_gib(self.kv_bytes)} GiB",
               f"linear-attention state: {_gib(self.linear_bytes)} GiB ({self.slots} × {s.linear_state_bytes:,} B)",
               f"kept prompts: {_gib(self.kept_bytes)} GiB ({self.kept_prompt_tokens:,} tokens; at most "
               f"{self.kept_prompts} prompts × ({s.linear_state_bytes:,} B linear state + a {CHUNK_TOKENS}-position "
               "chunk))" + ("; the last prompt is the sequence's own cache" if self.single else "")]
        out += [f"transient, {name}: {_gib(size)} GiB" for name, size in self.transients.items()]
        out += [f"largest transient (prefill or pass, not both): {_gib(self.transient_bytes)} GiB",
                f"runtime reserve: {_gib(RUNTIME_RESERVE)} GiB",
                f"device: {_gib(self.free_bytes)} GiB free × utilisation {self.utilisation} = "
                f"{_gib(self.usable_bytes)} GiB usable; headroom {_gib(self.headroom_bytes)} GiB"
                + ("" if self.fits else " (DOES NOT FIT)"),
                f"planned peak GiB: {_gib(self.peak_bytes)}"]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.shape.name, "kv_bytes_per_token": self.shape.kv_bytes_per_token, "slots": self.slots,
                "slot_tokens": self.slot_tokens, "capacity_tokens": self.capacity_tokens,
                "max_context": self.max_context, "weights_gib": _gib(self.shape.weights_bytes),
                "kv_gib": _gib(self.kv_bytes), "linear_state_gib": _gib(self.linear_bytes),
                "kept_prompts_gib": _gib(self.kept_bytes), "kept_prompts": self.kept_prompts, "transient_gib": _gib(self.transient_bytes),
                "usable_gib": _gib(self.usable_bytes), "headroom_gib": _gib(self.headroom_bytes),
                "planned_peak_gib": _gib(self.peak_bytes), "fits": self.fits}


def _gib(size: int) -> float:
    return round(size / GiB, 2)


def round_up(tokens: int, chunk: int = CHUNK_TOKENS) -> int:
    return -(-int(tokens) // chunk) * chunk


def plan(shape: ModelShape, *, free_bytes: int, utilisation: float = 0.9, slots: int = 8, max_context: int = 0,
         max_batch_tokens: int = 0, block: int = 32, prompt_cache_tokens: int = 32768, single: bool = False) -> MemoryPlan:
    """The plan for up to ``slots`` sequences of ``max_context`` positions (0: the model's window).
    ``max_batch_tokens`` > 0 caps the KV capacity (slots × max_context) in tokens; 0 plans as many of
    the ``slots`` as fit in ``utilisation`` of ``free_bytes`` (the device's free memory before the
    weights). A plan that fits no slot comes back with ``fits`` False, for the caller to refuse.
    ``single``: one sequence decoded batch-1, in the cache its prefill made (no slot, no copy): the last
    prompt kept is that cache itself."""
    if not 0.0 < utilisation <= 1.0:
        raise PlanError(f"the memory utilisation must be in (0, 1], got {utilisation}")
    if slots < 1 or block < 1 or free_bytes < 0 or max_context < 0 or max_batch_tokens < 0:
        raise PlanError("slots and block must be ≥ 1; memory and token figures ≥ 0")
    context = max_context or shape.context_window
    if max_batch_tokens:
        if max_batch_tokens < context:
            raise PlanError(f"engine.max_batch_tokens ({max_batch_tokens:,}) is less than one request's "
                            f"engine.max_context ({context:,})")
        slots = min(slots, max_batch_tokens // round_up(context + block))
        if slots < 1:
            raise PlanError(f"engine.max_batch_tokens ({max_batch_tokens:,}) holds no slot of "
                            f"{round_up(context + block):,} positions (max_context {context:,} and a block of "
                            f"{block}, in chunks of {CHUNK_TOKENS})")

    def made(count: int) -> MemoryPlan:
        return _made(shape, count, context, free_bytes, utilisation, block, prompt_cache_tokens, slots, single)

    if max_batch_tokens:
        return made(slots)
    for count in range(slots, 0, -1):  # as many of the asked slots as fit
        candidate = made(count)
        if candidate.fits:
            return candidate
    return made(1)


def _made(shape: ModelShape, slots: int, context: int, free_bytes: int, utilisation: float, block: int,
          prompt_cache_tokens: int, asked: int, single: bool = False) -> MemoryPlan:
    slot_tokens = round_up(context + block)  # a request at max_context still writes its last block
    layer_rectangle = slots * slot_tokens * 2 * shape.kv_heads * shape.head_dim * shape.dtype_bytes
    piece = min(context, PREFILL_CHUNK)
    transients = {
        "prefill activations": piece * shape.hidden * shape.dtype_bytes * (PREFILL_VECTORS + 2 * shape.experts_per_token)
        + piece * context * shape.dtype_bytes,  # and a later piece's mask over the prefix
        "admitted prompt's own cache": 0 if single else slot_tokens * shape.kv_bytes_per_token + shape.linear_state_bytes,
        "pass attention scores": slots * shape.q_heads * block * slot_tokens * SCORE_BYTES,
        "pass logits": slots * block * shape.vocab * SCORE_BYTES,
        "pass growth by a chunk (one layer's old buffers beside its new)": layer_rectangle if shape.full_layers else 0,
    }
    kept = prompt_cache_tokens + (0 if single else context)
    return MemoryPlan(shape, slots, slot_tokens, context, free_bytes, utilisation, block, kept, asked,
                      kept_prompts(prompt_cache_tokens), transients, single)


def kept_prompts(prompt_cache_tokens: int) -> int:
    """How many prompts CachedDenoiser keeps at once: the last only with no budget for older ones."""
    return KEPT_PROMPTS if prompt_cache_tokens > 0 else 1


# ---- shapes from configs ------------------------------------------------------------------------------

def shape_from_config(config: Any, *, dtype_bytes: int, weights_bytes: int, name: str = "") -> ModelShape:
    """The shape of a transformers config (an object, or a config.json mapping; a multimodal config's
    ``text_config`` is used)."""
    get = _getter(config)
    text = get("text_config")
    if text is not None:
        get = _getter(text)
    layers = int(get("num_hidden_layers"))
    kinds = list(get("layer_types") or [])[:layers] or ["full_attention"] * layers
    full = sum(1 for k in kinds if k in ("full_attention", "attention"))
    linear = sum(1 for k in kinds if k == "linear_attention")
    q_heads = int(get("num_attention_heads"))
    hidden = int(get("hidden_size"))
    head_dim = int(get("head_dim") or hidden // q_heads)
    kv_heads = int(get("num_key_value_heads") or q_heads)
    state = 0
    if linear:
        key_dim = int(get("linear_num_key_heads")) * int(get("linear_key_head_dim"))
        value_heads, value_head_dim = int(get("linear_num_value_heads")), int(get("linear_value_head_dim"))
        conv = (2 * key_dim + value_heads * value_head_dim) * int(get("linear_conv_kernel_dim")) * dtype_bytes
        # the recurrent state is kept in float32 by transformers' chunked Gated DeltaNet (counted so)
        recurrent = value_heads * int(get("linear_key_head_dim")) * value_head_dim * 4
        state = linear * (conv + recurrent)
    return ModelShape(name=name or str(get("_name_or_path") or get("model_type") or "model"), layers=layers,
                      full_layers=full, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim, hidden=hidden,
                      vocab=int(get("vocab_size")), experts_per_token=int(get("num_experts_per_tok") or 0),
                      dtype_bytes=dtype_bytes, linear_layers=linear, linear_state_bytes=state,
                      weights_bytes=int(weights_bytes), context_window=int(get("max_position_embeddings") or 0))


def _getter(config: Any):
    if isinstance(config, Mapping):
        return lambda key: config.get(key)
    return lambda key: getattr(config, key, None)


DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "float64": 8}


def clover_config() -> dict[str, Any]:
    """Clover-35B-A3B's config.json fields, shipped with the package (engine/data; its ``_source`` says
    where the figures come from)."""
    return json.loads(resources.files("clovercode.engine").joinpath("data", CLOVER_CONFIG).read_text("utf-8"))


def clover_shape(quantization: str = "none") -> ModelShape:
    """Clover's shape; its weights are the quantization mode × its parameters by module group
    (engine/weightplan.py: experts, linear layers, output projection, embeddings, the rest)."""
    from clovercode.engine.weightplan import counts_from_config, weights_bytes

    config = clover_config()
    dtype = DTYPE_BYTES[config["torch_dtype"]]
    size = weights_bytes(counts_from_config(config), quantization, dtype)
    name = "Clover-35B-A3B" + ("" if quantization in ("none", "auto") else f" ({quantization} weights)")
    return shape_from_config(config, dtype_bytes=dtype, weights_bytes=size, name=name)


def max_context(shape: ModelShape, *, free_bytes: int, utilisation: float = 0.9, slots: int = 1, block: int = 32,
                prompt_cache_tokens: int = 0, single: bool | None = None) -> int:
    """The longest context (the model's whole window when it fits, else whole chunks) each of ``slots``
    sequences may hold within the plan (0: not even one chunk fits). ``single`` (default: one slot) plans
    a batch-1 sequence decoded in its own prefilled cache; False plans slots a server copies prompts into."""
    single = slots == 1 if single is None else single

    def fits(context: int) -> bool:
        return _made(shape, slots, context, free_bytes, utilisation, block, prompt_cache_tokens, slots, single).fits

    if shape.context_window and fits(shape.context_window):
        return shape.context_window
    low, high = 0, shape.context_window // CHUNK_TOKENS
    while low < high:  # the plan's peak grows with the context: bisect on chunks
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle * CHUNK_TOKENS) else (low, middle - 1)
    return low * CHUNK_TOKENS

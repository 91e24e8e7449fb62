"""Which of the engine's fast paths a model's cache allows, and the adapter seam for a model's own code.

The fast paths (docs/engine.md): the index-written cache (``kvbuffer``: a pass writes only its own
rows), the static cache replayed as CUDA graphs (``staticcache``, ``graphs``) and slot batching
(``batchcache``, ``batchdenoiser``). Each hands the model a transformers ``Cache`` of the engine's
making, whose attention layers are ``DynamicLayer`` subclasses and whose Gated DeltaNet layers are
``LinearAttentionLayer`` s, and relies on the model touching it only through that API
(``Cache.update(keys, values, layer_idx)`` for attention, the linear layer's conv and recurrent
states for Gated DeltaNet, ``get_seq_length`` / ``get_mask_sizes`` for masks). transformers' own
classes do; a model's own code (``trust_remote_code``) may keep anything, so it gets none of them
unless it says it keeps to that contract.

**The adapter seam.** A model class shipped as remote code opts in with one class attribute::

    class CloverForCausalLM(PreTrainedModel):
        clovercode_cache = "transformers-cache/1"

which promises: the forward takes the cache as ``cache`` or ``past_key_values``, accepts the cache
the engine builds from the config (``layer_types`` naming ``full_attention`` / ``linear_attention``
layers), writes keys and values only through ``Cache.update`` and linear states only in the layer's
``conv_states`` / ``recurrent_states`` (in place, as transformers' Gated DeltaNet does), and honours a
4D additive ``attention_mask``. A model that keeps its own cache class needs an adapter module that
does this translation; the exactness tests of the fast paths (cached = recomputed, batched = alone)
are what decide whether a given model's promise holds.

Where a fast path is refused, ``skipped`` says which one and why, so the engine can print a note
instead of silently running the slow path.
"""

from __future__ import annotations

from typing import Any

CONTRACT = "transformers-cache/1"
PATHS = ("index-written cache", "static cache and CUDA graphs", "slot batching")


def library_model(model: Any) -> bool:
    return type(model).__module__.startswith("transformers.")


def keeps_contract(model: Any) -> bool:
    """Whether the engine's caches may be handed to this model (transformers' class, or the seam)."""
    return library_model(model) or getattr(type(model), "clovercode_cache", None) == CONTRACT


def refusal(model: Any) -> str | None:
    """Why the engine's caches are not used for ``model`` (None: they are)."""
    if keeps_contract(model):
        return None
    declared = getattr(type(model), "clovercode_cache", None)
    if declared is not None:
        return (f"its code declares clovercode_cache = {declared!r}, not {CONTRACT!r} (docs/engine.md, "
                "\"Fast paths and models that ship code\")")
    return (f"it runs its own code ({type(model).__name__}), which declares no cache contract "
            f"(clovercode_cache = {CONTRACT!r}; docs/engine.md, \"Fast paths and models that ship code\")")


def skipped(path: str, why: str) -> str:
    """One note line for a fast path that does not apply."""
    return f"{path} skipped: {why}"


def graph_refusal(model: Any) -> str | None:
    """Why CUDA graphs cannot capture this model's passes (None: they can). Quantized MoE experts can:
    :func:`prepare_graphs` moves them to a path with static shapes first."""
    return None


def prepare_graphs(model: Any) -> None:
    """Before passes are captured: quantized MoE experts take their fixed-capacity path (no routing-
    dependent shape, no host sync; engine/groupedexperts.py), at the price of dequantizing a fixed
    number of experts a layer (docs/engine.md, "Quantized weights")."""
    from clovercode.engine.qexperts import make_capturable

    make_capturable(model)

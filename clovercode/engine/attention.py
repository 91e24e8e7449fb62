"""Grouped-query attention under the engine's masks, without repeating keys and values per query head.

transformers' ``sdpa`` path asks torch for grouped attention (``enable_gqa``) only when there is no
mask on CUDA; with a mask it repeats every key and value head for each query head (``repeat_kv``: for
Clover's 16 query / 2 key-value heads, an 8× copy of the prefix in every full-attention layer, every
pass). The engine's denoising, commit and batched passes always carry a mask, so that copy was on
every hot path. This module registers one attention implementation with transformers
(``AttentionInterface`` and ``AttentionMaskInterface``, name ``NAME``) that reads the grouped keys
as they are, by the first route of this order that the probe accepts on the model's device and dtype:

1. ``flex``: FlexAttention (``torch.nn.attention.flex_attention``, compiled) with a ``BlockMask``
   made once per mask tensor (every layer of a forward shares it) and ``enable_gqa``. CUDA only:
   uncompiled flex materialises the whole score matrix, and compiling it on the CPU costs seconds
   per shape;
2. ``sdpa_gqa``: ``scaled_dot_product_attention(..., attn_mask=mask, enable_gqa=True)`` where the
   installed torch dispatches that to a fused kernel (``torch._fused_sdp_choice`` is not MATH: the
   math kernel repeats the heads itself). The CPU's flash kernel takes masks and grouped heads (torch
   ≥ 2.5); on CUDA it depends on the torch release and the head size;
3. ``flash_kvcache``: flash-attn's ``flash_attn_with_kvcache`` when installed (CUDA, fp16/bf16): each
   row's keys read in place up to its own length (``cache_seqlens``, ``cache_batch_idx``), causal rows
   and full rows in two calls. Only masks of the engine's shape (row r sees keys ``0 … n_r − 1``, its
   block whole or causally) can go this way; any other falls back to the plain path;
4. ``plain``: transformers' own sdpa function, unchanged.

A route is accepted only if it is available and its output on a small masked grouped case of the
model's shape equals the plain path's (bit for bit on the CPU in float32 and float64, where it is
the same kernel; within the dtype's rounding elsewhere). Without a mask, or without grouped heads,
every route is transformers' sdpa function: prefill keeps exactly the kernels ``generate`` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

NAME = "clovercode_gqa"
ROUTES = ("flex", "sdpa_gqa", "flash_kvcache", "plain")

# (device type, dtype) → the route the probe chose; a device/dtype never probed goes the plain way
_chosen: dict[tuple[str, Any], str] = {}
# the last mask a route derived something from (a BlockMask, row lengths): every layer of one forward
# shares one mask tensor, so deriving once per mask is once per forward. The mask itself is held, so
# no later tensor can reuse its memory and be mistaken for it.
_derived: dict[str, tuple[Any, int, Any]] = {}


@dataclass(frozen=True)
class Choice:
    route: str
    why: str  # one line: why this route, and why the earlier ones were not taken


def register() -> None:
    """Make ``NAME`` a transformers attention implementation (idempotent). Masks are built as for sdpa."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, grouped_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def install(model: Any, routes: tuple[str, ...] = ROUTES) -> Choice:
    """Probe the routes for ``model``'s device, dtype and head shape and, when one reads grouped keys,
    switch the model's attention to it. Models without grouped heads, or not on sdpa (a model's own
    code with its own attention), keep what they have."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads, kv_heads = getattr(config, "num_attention_heads", None), getattr(config, "num_key_value_heads", None)
    implementation = getattr(config, "_attn_implementation", None)
    if implementation not in ("sdpa", NAME):
        return Choice("plain", f"the model's attention is {implementation!r}, not sdpa")
    if not heads or not kv_heads or kv_heads >= heads:
        return Choice("plain", "no grouped query heads: sdpa repeats nothing")
    parameter = next(model.parameters())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    choice = probe(parameter.device, parameter.dtype, heads, kv_heads, head_dim, routes)
    if choice.route == "plain":
        return choice
    try:
        register()
        _chosen[(parameter.device.type, parameter.dtype)] = choice.route
        model.set_attn_implementation(NAME)
    except Exception as exc:  # noqa: BLE001 - a transformers or model that cannot switch keeps sdpa, and says why
        return Choice("plain", f"the model cannot switch its attention ({type(exc).__name__}: {exc})")
    if getattr(config, "_attn_implementation", None) != NAME:
        return Choice("plain", "the model does not switch its attention implementation")
    return choice


def probe(device: Any, dtype: Any, heads: int, kv_heads: int, head_dim: int,
          routes: tuple[str, ...] = ROUTES) -> Choice:
    """The first route in ``routes`` that is available here and equals the plain path on a small
    masked grouped case (two rows of different lengths, one denoising and one committing)."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(2, heads, 4, head_dim, generator=generator).to(device, dtype)
    k = torch.randn(2, kv_heads, 12, head_dim, generator=generator).to(device, dtype)
    v = torch.randn(2, kv_heads, 12, head_dim, generator=generator).to(device, dtype)
    mask = row_mask(torch.tensor([5, 8]), torch.tensor([False, True]), 4, 12, dtype).to(device)
    want = _plain(q, k, v, mask, None, heads // kv_heads)
    skipped = []
    for route in routes:
        if route == "plain":
            break
        missing = unavailable(route, q, k, v, mask)
        if missing:
            skipped.append(f"{route}: {missing}")
            continue
        try:
            got = _ROUTE_FUNCTIONS[route](q, k, v, mask, None)
        except Exception as exc:  # noqa: BLE001 - a route that fails here is not taken, and says why
            skipped.append(f"{route}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ''}")
            continue
        error = (got.float() - want.float()).abs().max().item()
        exact = device.type == "cpu" and dtype in (torch.float32, torch.float64)
        if error == 0 or (not exact and error <= _tolerance(dtype)):
            return Choice(route, "; ".join(skipped + [f"{route}: equal to the plain path (max diff {error:.1e})"]))
        skipped.append(f"{route}: differs from the plain path by {error:.1e}")
    return Choice("plain", "; ".join(skipped) or "asked for the plain path")


def unavailable(route: str, q: Any, k: Any, v: Any, mask: Any) -> str | None:
    """Why ``route`` cannot run here (None: it can)."""
    import torch

    if route == "flex":
        if q.device.type != "cuda":
            return "CUDA only (uncompiled FlexAttention materialises the scores)"
        try:
            import triton  # noqa: F401
            from torch.nn.attention.flex_attention import create_block_mask  # noqa: F401
        except ImportError as exc:
            return f"not importable ({exc.name})"
        return None
    if route == "sdpa_gqa":
        from torch.nn.attention import SDPBackend

        try:
            backend = torch._fused_sdp_choice(q, k, v, mask, 0.0, False, scale=None, enable_gqa=True)
        except (TypeError, RuntimeError) as exc:  # a torch without enable_gqa
            return f"this torch has no masked grouped sdpa ({type(exc).__name__})"
        if backend == SDPBackend.MATH.value:
            return f"torch {torch.__version__} runs masked grouped sdpa on its math kernel (which repeats the heads)"
        return None
    if route == "flash_kvcache":
        if q.device.type != "cuda" or q.dtype not in (torch.float16, torch.bfloat16):
            return "CUDA with fp16/bf16 only"
        if _flash_kernel() is None:
            return "flash-attn is not installed"
        return None
    return f"unknown route {route!r}"


def grouped_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                      scaling: float | None = None, is_causal: bool | None = None, position_bias: Any = None,
                      **kwargs: Any) -> tuple[Any, None]:
    """The registered attention function (transformers' signature): the chosen route for masked grouped
    attention, transformers' sdpa function for everything else."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    route = _chosen.get((query.device.type, query.dtype), "plain")
    plain = (attention_mask is None or groups <= 1 or route == "plain" or dropout or position_bias is not None
             or kwargs.get("softcap") is not None or kwargs.get("output_attentions"))
    if not plain and route == "flash_kvcache" and _rows(attention_mask) is None:
        plain = True  # a mask of another shape than the engine's
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, position_bias=position_bias, **kwargs)
    out = _ROUTE_FUNCTIONS[route](query, key, value, attention_mask, scaling)
    return out.transpose(1, 2).contiguous(), None


# -- the routes: (B, Hq, L, D) queries, (B, Hkv, K, D) keys and values, a (B|1, 1, L, K) mask → (B, Hq, L, D)

def _plain(q: Any, k: Any, v: Any, mask: Any, scaling: float | None, groups: int) -> Any:
    """What transformers' sdpa path computes under a mask: the key and value heads repeated."""
    import torch
    from transformers.integrations.sdpa_attention import repeat_kv

    return torch.nn.functional.scaled_dot_product_attention(q, repeat_kv(k, groups), repeat_kv(v, groups),
                                                            attn_mask=mask, scale=scaling)


def _sdpa_gqa(q: Any, k: Any, v: Any, mask: Any, scaling: float | None) -> Any:
    import torch

    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling, enable_gqa=True)


def _flex(q: Any, k: Any, v: Any, mask: Any, scaling: float | None) -> Any:
    return flex_kernel()(q, k, v, block_mask=block_mask(mask, q.shape[0]), scale=scaling, enable_gqa=True)


_flex_compiled: list[Any] = []


def flex_kernel() -> Callable[..., Any]:
    """FlexAttention, compiled once per process (on CUDA; the tests call the uncompiled one on CPU)."""
    if not _flex_compiled:
        import torch
        from torch.nn.attention.flex_attention import flex_attention

        _flex_compiled.append(torch.compile(flex_attention, dynamic=False) if torch.cuda.is_available() else flex_attention)
    return _flex_compiled[0]


def block_mask(mask: Any, batch: int) -> Any:
    """A ``BlockMask`` with exactly the positions ``mask`` allows (a boolean mask, or an additive one
    whose entries are 0 or the dtype's minimum: the engine's), made once per mask tensor."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    cached = _derived.get("flex")
    if cached is not None and cached[0] is mask and cached[1] == mask._version:
        return cached[2]
    allowed = mask if mask.dtype == torch.bool else mask == 0
    allowed = allowed.expand(batch, 1, *mask.shape[-2:])
    made = create_block_mask(lambda b, h, i, j: allowed[b, 0, i, j], batch, None, mask.shape[-2], mask.shape[-1],
                             device=mask.device)
    _derived["flex"] = (mask, mask._version, made)
    return made


def _flash_kvcache(q: Any, k: Any, v: Any, mask: Any, scaling: float | None, kernel: Any = None) -> Any:
    """flash-attn over the keys in place: row r reads keys ``0 … lengths[r] − 1`` (its prefix and block),
    the block causally for committing rows (flash-attn aligns causal queries to the end of the keys)."""
    import torch

    rows = _rows(mask)
    if rows is None:
        raise ValueError("the mask is not of the engine's shape (a prefix, then the block whole or causal)")
    lengths, causal = (part.expand(q.shape[0]) for part in rows)  # a mask broadcast over the rows
    kernel = kernel or _flash_kernel()
    # flash-attn reads (B, T, H, D): the transposed views of the cache, no copy
    kt, vt, qt = k.transpose(1, 2), v.transpose(1, 2), q.transpose(1, 2)
    out = torch.empty_like(qt)
    for flag in (False, True):
        picked = (causal == flag).nonzero().view(-1)
        if picked.numel() == 0:
            continue
        out[picked] = kernel(qt.index_select(0, picked), kt, vt, cache_seqlens=lengths.index_select(0, picked),
                             cache_batch_idx=picked, softmax_scale=scaling, causal=flag)
    return out.transpose(1, 2)


def _rows(mask: Any) -> tuple[Any, Any] | None:
    """(lengths, causal) when ``mask`` is the engine's row mask (row r: keys before ``lengths[r] − L``,
    then its L-token block whole, or causally when ``causal[r]``; nothing after), else None. Derived and
    checked once per mask tensor (one read back to the host)."""
    import torch

    cached = _derived.get("rows")
    if cached is not None and cached[0] is mask and cached[1] == mask._version:
        return cached[2]
    allowed = (mask if mask.dtype == torch.bool else mask == 0)[:, 0]  # (R, L, K)
    queries, keys = allowed.shape[-2:]
    lengths = allowed[:, -1].sum(-1)
    causal = allowed[:, 0].sum(-1) < lengths
    rebuilt = row_mask(lengths - queries, causal, queries, keys, torch.float32, allowed.device) == 0
    found = (lengths, causal) if bool((lengths >= queries).all()) and torch.equal(rebuilt[:, 0], allowed) else None
    _derived["rows"] = (mask, mask._version, found)
    return found


def row_mask(prefix: Any, causal: Any, queries: int, keys: int, dtype: Any, device: Any = None) -> Any:
    """(R, 1, L, K) additive: row r sees its ``prefix[r]`` keys, then its block of ``queries`` (all of
    it, or positions ≤ its own when ``causal[r]``), nothing after."""
    import torch

    prefix, causal = prefix.to(device), causal.to(device)
    key = torch.arange(keys, device=device)[None, None, :]
    query = torch.arange(queries, device=device)[None, :, None]
    relative = key - prefix[:, None, None]
    allowed = (relative < 0) | ((relative < queries) & (~causal[:, None, None] | (relative <= query)))
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


def _flash_kernel() -> Any:
    try:
        from flash_attn import flash_attn_with_kvcache
    except ImportError:
        return None
    return flash_attn_with_kvcache


def _tolerance(dtype: Any) -> float:
    import torch

    return {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}.get(dtype, 1e-5)


_ROUTE_FUNCTIONS: dict[str, Callable[..., Any]] = {"flex": _flex, "sdpa_gqa": _sdpa_gqa, "flash_kvcache": _flash_kvcache}

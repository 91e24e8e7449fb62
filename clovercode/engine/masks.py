"""4D additive attention masks (batch 1, 1, queries, keys): 0 where a query may look, -inf-ish elsewhere.

Always float and additive: transformers uses a 4D mask as given, while a boolean mask under eager
attention is silently misread. Shapes in comments: P = committed length, B = block length.
"""

from __future__ import annotations

from typing import Any


def additive(allowed: Any, dtype: Any) -> Any:
    """(q, k) bool → (1, 1, q, k) additive mask in ``dtype``."""
    import torch

    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def causal_rows(prefix: int, rows: int, device: Any = None) -> Any:
    """(rows, prefix + rows) bool: new row i sees the whole prefix and new rows 0..i."""
    import torch

    allowed = torch.ones(rows, prefix + rows, dtype=torch.bool, device=device)
    allowed[:, prefix:] = torch.ones(rows, rows, dtype=torch.bool, device=device).tril()
    return allowed


def block_rows(prefix: int, rows: int, device: Any = None) -> Any:
    """(rows, prefix + rows) bool: every block row sees the prefix and the whole block."""
    import torch

    return torch.ones(rows, prefix + rows, dtype=torch.bool, device=device)


def reference_rows(committed: int, block: int, device: Any = None) -> Any:
    """(P + B, P + B) bool for recomputing from scratch: causal over the committed tokens, the block
    bidirectional and seeing everything committed (what the cached passes compute piecewise)."""
    import torch

    total = committed + block
    allowed = torch.ones(total, total, dtype=torch.bool, device=device).tril()
    allowed[committed:, :] = True
    return allowed


def full_block(prefix: int, rows: int, dtype: Any, device: Any = None) -> Any:
    """``additive(block_rows(prefix, rows), dtype)`` made directly on ``device``: all zeros, since a block
    row sees everything. A denoising pass uses it as is, with nothing built on the host or copied over."""
    import torch

    return torch.zeros((1, 1, rows, prefix + rows), dtype=dtype, device=device)

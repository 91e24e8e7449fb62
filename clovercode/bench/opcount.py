"""Tensor operations a forward dispatches, by part of the model: a ``TorchDispatchMode`` sees every ATen
operation the forward runs, and module hooks say which part is running. On a GPU without graphs each
operation that computes is one kernel launch (a few microseconds of host time each), which a CPU run
cannot show in time but can count.

Parts: ``routing+experts`` (the MoE block: router, routed experts, combining them; its shared expert
apart), ``shared expert``, ``GDN/attention`` (the token mixer of each layer), ``LM head``, and ``the
rest`` (embeddings, norms, residuals, rotary tables, masks). Not counted as launches: views and other
aliases (metadata only) and ``empty`` allocations. ``syncs`` are operations that make the host wait for
the device (``.item()``, ``nonzero``); on the CPU a ``.tolist()`` reads memory without dispatching,
so it is not seen. An operation on a tensor subclass (torchao's quantized weights) counts once, as the
mode sees it; the subclass's own inner operations run below the mode.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

PARTS = ("routing+experts", "shared expert", "GDN/attention", "LM head", "the rest")
ALLOCATIONS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
SYNCS = {"_local_scalar_dense", "nonzero", "is_nonzero", "equal", "masked_select", "unique", "_unique2"}


def launches(func: Any) -> bool:
    """Whether ``func`` computes (a kernel on a GPU) rather than only making a view or an allocation."""
    name = func._schema.name.split("::")[-1]
    if name in ALLOCATIONS:
        return False
    returns = func._schema.returns
    aliases = [r.alias_info for r in returns]
    return not (aliases and all(a is not None and not a.is_write for a in aliases))


class OpCounter(TorchDispatchMode):
    """Counts the operations dispatched while active, under the part named on top of ``stack``."""

    def __init__(self) -> None:
        super().__init__()
        self.stack = ["the rest"]
        self.ops: Counter[str] = Counter()
        self.views: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()
        self.names: dict[str, Counter[str]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        part = self.stack[-1]
        name = func._schema.name.split("::")[-1]
        if launches(func):
            self.ops[part] += 1
            self.names.setdefault(part, Counter())[name] += 1
        else:
            self.views[part] += 1
        if name in SYNCS:
            self.syncs[part] += 1
        return func(*args, **(kwargs or {}))


def _parts(model: Any) -> Iterator[tuple[Any, str]]:
    """(module, part) for the modules whose forward starts a part; inner ones override outer ones."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        yield head, "LM head"
    for module in model.modules():
        if hasattr(module, "experts") and hasattr(module, "gate"):  # a sparse MoE block
            yield module, "routing+experts"
            for name in ("shared_expert", "shared_expert_gate"):
                if getattr(module, name, None) is not None:
                    yield getattr(module, name), "shared expert"
        for name in ("self_attn", "linear_attn"):
            mixer = getattr(module, name, None)
            if isinstance(mixer, torch.nn.Module):
                yield mixer, "GDN/attention"


class counting:
    """``with counting(model) as counter:`` — forwards in the block are counted by part."""

    def __init__(self, model: Any):
        self.model = model
        self.counter = OpCounter()
        self.handles: list[Any] = []

    def __enter__(self) -> OpCounter:
        stack = self.counter.stack

        def enter(part: str) -> Callable[..., None]:
            return lambda module, args: stack.append(part)  # list.append returns None: inputs unchanged

        def leave(module: Any, args: Any, out: Any) -> None:  # a hook's return value would replace the output
            stack.pop()

        for module, part in _parts(self.model):
            self.handles.append(module.register_forward_pre_hook(enter(part)))
            self.handles.append(module.register_forward_hook(leave))
        self.counter.__enter__()
        return self.counter

    def __exit__(self, *exc: Any) -> None:
        self.counter.__exit__(*exc)
        for handle in self.handles:
            handle.remove()


def summary(counter: OpCounter, moe_layers: int) -> dict[str, Any]:
    ops = {part: counter.ops.get(part, 0) for part in PARTS}
    return {"ops": ops, "total": sum(ops.values()), "views": sum(counter.views.values()),
            "syncs": {p: n for p, n in counter.syncs.items() if n},
            "experts_ops_per_layer": round(ops["routing+experts"] / moe_layers, 1) if moe_layers else 0,
            "top_experts_ops": dict(counter.names.get("routing+experts", Counter()).most_common(8))}

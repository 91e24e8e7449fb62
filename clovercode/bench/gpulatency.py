"""Per-pass latency on a random-weight model with Clover's architecture.

For each prompt length one row is prefilled for real (timed) with the engine's ``CachedDenoiser``; its
cache is copied into static caches of R identical rows (``engine/staticcache.py``). A denoising pass
of R rows × one block is then timed eagerly and as a CUDA graph (``engine/graphs.StaticPasses``), and
a commit pass likewise (its state change is undone outside the timed region). For R = 1 the engine's
dynamic-cache pass (today's path) is timed too. "Batch 1 vs 8": R rows in one forward against R
forwards of one row, from the same table. Everything is forward-level: no sampling, no host-side
decisions (those are the decoder's, measured by ``bench engine``).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(run: Callable[[], Any], device: str, repeats: int, warmup: int = 1,
          undo: Callable[[], None] | None = None) -> dict[str, float]:
    """Milliseconds per call (median and fastest of ``repeats``), each call synchronised; ``undo``
    runs between calls, outside the timing."""
    for _ in range(warmup):
        run()
        if undo is not None:
            undo()
    samples = []
    for _ in range(repeats):
        _sync(device)
        started = time.perf_counter()
        run()
        _sync(device)
        samples.append((time.perf_counter() - started) * 1000)
        if undo is not None:
            undo()
    return {"median_ms": round(statistics.median(samples), 3), "min_ms": round(min(samples), 3)}


class Budget:
    """Wall-clock allowance: measurements that would start after it are skipped and reported so."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


def measure(model: Any, device: str, prompts: Sequence[int], rows: Sequence[int], block: int, repeats: int,
            budget: Budget, batch_pair: tuple[int, int] = (1, 8)) -> dict[str, Any]:
    import torch

    from clovercode.engine.denoiser import CachedDenoiser

    config = model.config
    mask_id = config.mask_token_id
    results: list[dict[str, Any]] = []
    skipped: list[str] = []
    for prompt_tokens in prompts:
        if budget.left() <= 0:
            skipped += [f"P={prompt_tokens} R={r}" for r in rows]
            continue
        ids = torch.randint(3, config.vocab_size - 2, (prompt_tokens,), generator=torch.Generator().manual_seed(1))
        dynamic = CachedDenoiser(model)
        _sync(device)
        started = time.perf_counter()
        state = dynamic.prefill(ids.tolist())
        _sync(device)
        prefill_ms = round((time.perf_counter() - started) * 1000, 1)
        results.append({"prompt_tokens": prompt_tokens, "rows": 1, "mode": "prefill", "median_ms": prefill_ms,
                        "min_ms": prefill_ms})
        block_ids = torch.full((block,), mask_id)
        block_ids[0] = 5
        results.append({"prompt_tokens": prompt_tokens, "rows": 1, "mode": "dynamic_eager", "kind": "denoise",
                        **timed(lambda: dynamic.denoise(state, block_ids), device, repeats)})
        wanted = sorted(set(rows) | ({batch_pair[1]} if prompt_tokens == min(prompts) else set()))
        for count in wanted:
            if budget.left() <= 0:
                skipped.append(f"P={prompt_tokens} R={count}")
                continue
            try:
                results += _static_rows(model, device, state.cache, prompt_tokens, count, block, repeats)
            except torch.OutOfMemoryError as exc:
                skipped.append(f"P={prompt_tokens} R={count}: out of memory ({str(exc).splitlines()[0][:120]})")
            finally:
                if device.startswith("cuda"):
                    torch.cuda.empty_cache()
        del state, dynamic
    return {"block": block, "repeats": repeats, "passes": results, "skipped": skipped,
            "batch_1_vs_8": batch_gain(results, min(prompts), batch_pair)}


def _static_rows(model: Any, device: str, cache: Any, prompt_tokens: int, rows: int, block: int,
                 repeats: int) -> list[dict[str, Any]]:
    import torch

    from clovercode.engine import cachestate, staticcache
    from clovercode.engine.graphs import StaticPasses

    # Just room for one block (rounded to 256): the engine's doubling would make a 32k prompt attend
    # over 64k rows and hold twice the memory, which is the engine's cost but not the pass's.
    kv = staticcache.build(cache, rows, -(-(prompt_tokens + block) // 256) * 256)
    mask_id = model.config.mask_token_id
    denoise_ids = torch.full((rows, block), mask_id)
    denoise_ids[:, 0] = 5
    commit_ids = torch.randint(3, 100, (rows, block))
    out: list[dict[str, Any]] = []
    for mode in ("eager", "graphs") if device.startswith("cuda") else ("eager",):
        passes = StaticPasses(model, kv, graphs=mode == "graphs")
        row = {"prompt_tokens": prompt_tokens, "rows": rows, "mode": mode, "capacity": kv.capacity}
        out.append({**row, "kind": "denoise",
                    **timed(lambda: passes.run("denoise", denoise_ids, prompt_tokens), device, repeats, warmup=2)})
        committed = cachestate.snapshot(kv.cache)

        def undo() -> None:
            cachestate.restore(kv.cache, committed)
            kv.set_length(prompt_tokens)
            passes.snap = None

        out.append({**row, "kind": "commit", **timed(lambda: passes.run("commit", commit_ids, prompt_tokens), device,
                                                      repeats, warmup=2, undo=undo)})
        if passes.graph_error:
            out[-1]["graph_error"] = out[-2]["graph_error"] = passes.graph_error
        out[-1]["graphs_captured"] = passes.captured
    return out


def batch_gain(passes: list[dict[str, Any]], prompt_tokens: int, pair: tuple[int, int]) -> list[dict[str, Any]]:
    """R rows in one forward vs R forwards of one row: throughput gain = R × t(1) / t(R)."""
    one, many = pair
    gains = []
    for mode in ("eager", "graphs"):
        t = {p["rows"]: p["median_ms"] for p in passes if p.get("mode") == mode and p.get("kind") == "denoise"
             and p["prompt_tokens"] == prompt_tokens}
        if one in t and many in t:
            gains.append({"mode": mode, "prompt_tokens": prompt_tokens, f"{one}_row_ms": t[one],
                          f"{many}_rows_ms": t[many], f"{many}_forwards_of_{one}_ms": round(many * t[one], 3),
                          "throughput_gain": round(many * t[one] / t[many], 2) if t[many] else None})
    return gains

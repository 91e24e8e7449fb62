"""gpu_check's quantized section (issue 36): bf16 against int4 and fp8 side by side, through the engine's
own loader (quantized while each tensor loads).

* A Clover-shaped MoE hybrid (random weights, Clover's sizes, ``layers`` layers) saved in bf16 and
  loaded in each mode: load seconds, host and device peak during the load, weight bytes by module
  group, one block pass after a prefill (ms).
* clover-tiny (trained): greedy tokens/s over gpu_check's eval prompts, token agreement with bf16, and
  constrained tool calls (the ``required`` grammar) valid by the tool schemas.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

MODES = ("none", "int4", "fp8")
GiB = 2 ** 30


class PeakRSS:
    """The process's largest anonymous resident memory (resident minus file-backed shared pages: the
    checkpoint's mapped pages are page cache, not the load's) while the block runs, sampled every few ms."""

    def __init__(self, every: float = 0.005):
        import psutil

        self.process, self.every = psutil.Process(), every
        self.peak = self.start = 0
        self._stop = threading.Event()

    def __enter__(self) -> "PeakRSS":
        self.start = self.peak = self._anon()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, self._anon())

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._anon())

    def _anon(self) -> int:
        info = self.process.memory_info()
        return info.rss - getattr(info, "shared", 0)

    @property
    def grown_gib(self) -> float:
        return round((self.peak - self.start) / GiB, 3)


def save_moe(folder: Path, device: str, layers: int, dry: bool) -> dict[str, Any]:
    """A random Clover-shaped model saved in bf16 (with clover-tiny's tokenizer files beside it)."""
    import torch

    from clovercode.bench.gpuarch import CLOVER_SIZES, TINY_SIZES, random_model, text_config
    from clovercode.engine.sources import resolve

    config = text_config(TINY_SIZES if dry else CLOVER_SIZES, layers)
    model = random_model(config, device, torch.bfloat16, head_scale=8.0)
    started = time.monotonic()
    model.save_pretrained(folder, max_shard_size="2GB")
    tiny = resolve("clover-tiny").path
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny / name, folder / name)
    size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    del model
    _empty(device)
    return {"layers": layers, "checkpoint_gib": round(size / GiB, 2), "shards": len(list(folder.glob("*.safetensors"))),
            "saved_s": round(time.monotonic() - started, 1)}


def _empty(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def _open(spec: str, device: str, mode: str, **extra: Any) -> Any:
    from rich.console import Console

    from clovercode.engine.config import EngineConfig
    from clovercode.engine.engine import Engine

    return Engine.open(spec, EngineConfig(device=device, dtype="bfloat16", quantization=mode, **extra),
                       Console(stderr=True))


def moe_row(folder: Path, device: str, mode: str, dry: bool) -> dict[str, Any]:
    import torch

    from clovercode.engine import memory, quantize
    from clovercode.engine.denoiser import CachedDenoiser

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    started = time.monotonic()
    with PeakRSS() as host:
        engine = _open(str(folder), device, mode)
    row: dict[str, Any] = {"mode": mode, "load_s": round(time.monotonic() - started, 1),
                           "host_peak_growth_gib": host.grown_gib,
                           "weights_gib": round(memory.weights_bytes(engine.model) / GiB, 3)}
    if cuda:
        row["device_peak_gib"] = round((torch.cuda.max_memory_allocated() - before) / GiB, 3)
    row["groups"] = {g: {"gib": round(v["bytes"] / GiB, 3), "vs_bf16": round(v["bytes"] / max(1, v["bf16_bytes"]), 3)}
                     for g, v in quantize.bytes_by_group(engine.model).items()}
    denoiser = CachedDenoiser(engine.model)
    vocab = engine.model.config.vocab_size
    prompt = [int(t) for t in torch.randint(3, min(2000, vocab - 3), (64 if dry else 512,),
                                            generator=torch.Generator().manual_seed(1))]
    state = denoiser.prefill(prompt)
    block = [engine.model.config.mask_token_id] * 32
    times = []
    for _ in range(2 if dry else 5):
        if cuda:
            torch.cuda.synchronize()
        tick = time.perf_counter()
        logits = denoiser.denoise(state, block)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - tick)
    row["block_pass_ms"] = round(sorted(times)[len(times) // 2] * 1000, 1)
    row["block_argmax"] = logits.argmax(-1).tolist()
    engine.close()
    del engine, denoiser, state
    _empty(device)
    return row


def _guarded(mode: str, run: Callable[[], dict[str, Any]], device: str) -> dict[str, Any]:
    """One mode's row; a mode that fails is a row that says why, and the others still run."""
    try:
        return run()
    except Exception as exc:  # the report says what broke; the log has the traceback
        import traceback

        traceback.print_exc()
        _empty(device)
        return {"mode": mode, "error": f"{type(exc).__name__}: {str(exc).strip()[:400]}"}


def tiny_rows(device: str, requests: tuple[str, ...], dry: bool) -> list[dict[str, Any]]:
    """clover-tiny per mode: tokens/s, agreement with bf16, constrained calls valid."""
    rows: list[dict[str, Any]] = []
    reference: list[Any] | None = None
    for mode in MODES:
        rows.append(_guarded(mode, lambda: _tiny_row(device, mode, requests, dry, reference), device))
        if reference is None:
            reference = rows[-1].pop("outputs", None)
        rows[-1].pop("outputs", None)
    return rows


def _tiny_row(device: str, mode: str, requests: tuple[str, ...], dry: bool, reference: Any) -> dict[str, Any]:
    """One mode of clover-tiny: greedy tokens/s over ``requests``, agreement with ``reference`` (bf16's)."""
    engine = _open("clover-tiny", device, mode, max_new_tokens=48 if dry else 128)
    plan = engine.plan(block_size=16, threshold=0.9)
    stops = engine.stops(("</tool_call>",))
    outputs, tokens, seconds = [], 0, 0.0
    for request in requests:
        text = engine.tokenizer.apply_chat_template([{"role": "user", "content": request}], tokenize=False,
                                                    add_generation_prompt=True)
        runs = [engine.generate(engine.encode(text), plan, stops) for _ in range(1 if dry else 2)]
        best = min(runs, key=lambda r: r.stats.decode_s)
        outputs.append(best.tokens)
        tokens += best.stats.new_tokens
        seconds += best.stats.decode_s
    row: dict[str, Any] = {"mode": mode, "new_tokens": tokens, "outputs": outputs,
                           "tokens_per_s": round(tokens / seconds, 1) if seconds else None}
    reference = reference if reference is not None else outputs
    same = sum(a == b for out, ref in zip(outputs, reference) for a, b in zip(out, ref))
    row["token_agreement_vs_bf16"] = round(same / max(1, sum(len(r) for r in reference)), 3)
    row["identical_outputs"] = sum(out == ref for out, ref in zip(outputs, reference))
    row.update(_constrained(engine, requests))
    engine.close()
    _empty(device)
    return row


def _constrained(engine: Any, requests: tuple[str, ...]) -> dict[str, Any]:
    """Every request decoded under the ``required`` tool-call grammar: how many calls parse and validate."""
    try:
        from clovercode.engine.grammar import tool_call_grammar
        from clovercode.toolcalls.parser import parse_turn
        from clovercode.toolcalls.schemas import load_tool_specs
        from clovercode.toolcalls.validate import Validator

        specs = load_tool_specs()
        compiler = engine.grammar_compiler()
        grammar = tool_call_grammar([{"name": s.name, "parameters": s.parameters} for s in specs], "required", "xml",
                                    compiler.special)
    except ImportError as exc:  # llguidance or jsonschema not carried
        return {"constrained": f"not run: {exc}"}
    validator, valid = Validator(specs), 0
    plan = engine.plan(block_size=16, threshold=0.9)
    for request in requests:
        text = engine.tokenizer.apply_chat_template([{"role": "user", "content": request}], tokenize=False,
                                                    add_generation_prompt=True)
        result = engine.generate(engine.encode(text), plan, engine.stops(("</tool_call>",)),
                                 constraint=compiler.constraint(grammar))
        turn = parse_turn(result.text)
        valid += bool(turn.calls) and not turn.errors and all(validator.check(c, "c").ok for c in turn.calls)
    return {"constrained_valid": valid, "constrained_of": len(requests)}


def run(device: str, dry: bool, requests: tuple[str, ...], layers: int | None = None,
        say: Callable[[str], None] = print) -> dict[str, Any]:
    import torch

    from clovercode.engine.memplan import PREFILL_CHUNK

    report: dict[str, Any] = {"modes": list(MODES), "prefill_chunk": PREFILL_CHUNK}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        folder = Path(tmp) / "moe"
        report["moe"] = save_moe(folder, device, layers or (2 if dry else 4), dry)
        say(f"quantized: saved a {report['moe']['checkpoint_gib']} GiB Clover-shaped checkpoint")
        rows = []
        for mode in MODES:
            rows.append(_guarded(mode, lambda: moe_row(folder, device, mode, dry), device))
            say(f"quantized: {mode}: {rows[-1].get('weights_gib')} GiB of weights, loaded in {rows[-1].get('load_s')} s")
        reference = rows[0].pop("block_argmax", None)
        for row in rows[1:]:
            got = row.pop("block_argmax", None)
            if got is not None and reference is not None:
                row["block_argmax_agreement_vs_bf16"] = round(
                    sum(a == b for a, b in zip(got, reference)) / len(reference), 3)
        report["moe_rows"] = rows
    report["clover_tiny"] = tiny_rows(device, requests if not dry else requests[:2], dry)
    report["torch"] = torch.__version__
    try:
        import torchao

        report["torchao"] = torchao.__version__
    except ImportError:
        report["torchao"] = None
    return report

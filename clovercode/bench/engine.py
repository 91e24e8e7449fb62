"""``clovercode bench engine``: decoding schedules measured side by side on one model, in one run.

For held-out agent turns (clovercode/bench/toolcorpus.py, eval split, none of which can occur in the
training data) it decodes each prompt with the AR baseline (B = 1: one commit pass per token, what
transformers' greedy ``generate`` does), the one-token-per-pass schedule (block B, top-1 per pass) and
threshold decoding at several thresholds, interleaved prompt by prompt so machine load hits all
alike. Speed-ups are tokens/s against the AR baseline. Every forward pass after prefill is counted
(commit passes included). Then it times one block (a fixed number of denoising passes plus the
commit) at growing prompt lengths, with the prefix cache and by recomputing the whole sequence every
pass.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from clovercode.bench.passcost import TARGET_US as PASS_TARGET_US, engine_pass_costs
from clovercode.bench.toolcorpus import held_out
from clovercode.ground.messages import Message
from clovercode.engine.chat import render_prompt
from clovercode.engine.config import EngineConfig
from clovercode.engine.decoder import DecodeResult
from clovercode.engine.denoiser import CachedDenoiser, RecomputeDenoiser
from clovercode.engine.engine import Engine
from clovercode.toolcalls.parser import parse_turn
from clovercode.toolcalls.validate import Validator

TARGETS = {"tokens_per_forward": 2.0, "valid": 0.90, "agreement": 0.95, "speedup": 3.0, "block_cost_ratio": 0.2,
           "grammar_speed": 0.9}
AR = "AR B=1"  # the baseline every speed-up is measured against
GRAMMAR = " + grammar"  # suffix of a constrained schedule's name, and its key in the plan overrides


@dataclass(frozen=True)
class BenchOptions:
    model: str = "clover-tiny"
    prompts: int = 24
    block_size: int = 0  # 0: the model's own
    thresholds: tuple[float, ...] = (0.95, 0.9, 0.8, 0.7)
    lengths: tuple[int, ...] = (128, 512, 1024, 2048)
    passes_per_block: int = 4  # denoising passes in the timed block of the scaling table
    max_new_tokens: int = 128
    repeats: int = 3  # each prompt is decoded this often per schedule; the fastest run counts (load spikes)
    seed: int = 0
    device: str = "auto"
    dtype: str = "auto"
    grammar: bool = True  # also decode AR and threshold 0.9 under the tool-call grammar (tool_choice=required)
    trust_remote_code: tuple[str, ...] = ()  # engine.trust_remote_code (the trusted models), as every command
    cache_dir: str = ""  # engine.cache_dir: where converted GGUF models are kept

    def __post_init__(self) -> None:  # checked before minutes of loading and decoding, not after
        if any(not 0 < t <= 1 for t in self.thresholds):
            raise ValueError(f"thresholds must be in (0, 1], got {', '.join(map(str, self.thresholds))}")
        if any(n < 1 for n in self.lengths):
            raise ValueError(f"prompt lengths must be ≥ 1, got {', '.join(map(str, self.lengths))}")


@dataclass
class ScheduleRow:
    name: str
    block_size: int
    tokens: int = 0
    forwards: int = 0
    prefill_s: list[float] = field(default_factory=list)
    first_block_s: list[float] = field(default_factory=list)
    decode_s: float = 0.0
    valid: int = 0
    exact: int = 0
    matched: int = 0  # tokens equal to the one-token-per-pass output, position by position
    compared: int = 0
    outputs: list[list[int]] = field(default_factory=list)

    @property
    def speed(self) -> float:
        return self.tokens / self.decode_s if self.decode_s else 0.0

    def summary(self, baseline: "ScheduleRow | None", prompts: int, one_per_pass: "ScheduleRow | None" = None
                ) -> dict[str, Any]:
        speed = self.speed
        return {"schedule": self.name, "block_size": self.block_size,
                "prefill_ms": round(1000 * statistics.median(self.prefill_s), 2),
                "first_block_ms": round(1000 * statistics.median(self.first_block_s), 2),
                "tokens_per_s": round(speed, 1), "tokens_per_forward": round(self.tokens / max(1, self.forwards), 3),
                "tokens": self.tokens, "forwards": self.forwards,
                "agreement": round(self.matched / self.compared, 4) if self.compared else None,
                "valid_calls": round(self.valid / prompts, 4), "exact_calls": round(self.exact / prompts, 4),
                "speedup": round(speed / baseline.speed, 2) if baseline and baseline.speed else None,
                "speedup_vs_one_per_pass": (round(speed / one_per_pass.speed, 2)
                                            if one_per_pass and one_per_pass.speed else None)}


def held_out_turns(count: int, seed: int) -> list[Any]:
    """``count`` (turn, expected call) pairs from the eval split that cannot occur in the training data."""
    return held_out(count, seed).turns


def held_out_summary(held: Any) -> dict[str, Any]:
    """How many eval turns were drawn, and which were left out because they can occur in training."""
    reasons: dict[str, dict[str, Any]] = {}
    for turn, reason in held.excluded:
        entry = reasons.setdefault(reason, {"count": 0, "example": turn.request})
        entry["count"] += 1
    return {"drawn": held.drawn, "kept": len(held.turns), "excluded": len(held.excluded), "reasons": reasons}


def run_engine_bench(options: BenchOptions, console: Console) -> dict[str, Any]:
    config = EngineConfig(device=options.device, dtype=options.dtype, max_new_tokens=options.max_new_tokens,
                          trust_remote_code=options.trust_remote_code)
    engine = Engine.open(options.model, config, console, cache_dir=options.cache_dir)
    block = engine.block_size(options.block_size or None) if engine.info.diffusion_capable else 1
    schedules: list[tuple[ScheduleRow, dict[str, Any]]] = [(ScheduleRow(AR, 1), ar_overrides(engine))]
    if block > 1:
        schedules.append((ScheduleRow(f"1 token/pass B={block}", block),
                          {"block_size": block, "strategy": "topk", "top_k": 1}))
        schedules += [(ScheduleRow(f"threshold {t:g} B={block}", block),
                       {"block_size": block, "strategy": "threshold", "threshold": t}) for t in options.thresholds]
    if options.grammar:  # the same schedules under tool_choice=required, side by side with the free ones
        schedules += [(ScheduleRow(row.name + GRAMMAR, row.block_size), {**overrides, GRAMMAR: True})
                      for row, overrides in schedules if row.name == AR or row.name.startswith("threshold 0.9 ")]
    grammar = required_grammar(engine) if options.grammar else ""
    validator = Validator(engine_specs())
    held = held_out(options.prompts, options.seed)
    turns = held.turns
    stops = engine.stops(("</tool_call>",))
    with console.status("Decoding held-out turns…") as status:
        for number, (turn, expected) in enumerate(turns, 1):
            status.update(f"Decoding held-out turns… {number}/{len(turns)}")
            prompt = engine.encode(render_prompt(engine.tokenizer, [Message("user", turn.request)], (), False))
            runs: dict[str, list[DecodeResult]] = {row.name: [] for row, _ in schedules}
            for _ in range(options.repeats):  # interleaved, so a burst of load hits every schedule alike
                for row, overrides in schedules:
                    constraint = engine.constraint(grammar) if overrides.get(GRAMMAR) else None
                    plan = engine.plan(**{k: v for k, v in overrides.items() if k != GRAMMAR})
                    runs[row.name].append(engine.generate(prompt, plan, stops, denoiser=CachedDenoiser(engine.model),
                                                          constraint=constraint))
            for row, _ in schedules:
                _record(row, fastest(runs[row.name]), expected, validator)
    reference = schedules[1][0] if len(schedules) > 1 else None
    for row, _ in schedules:
        if reference is not None:
            for mine, theirs in zip(row.outputs, reference.outputs):
                row.matched += sum(a == b for a, b in zip(mine, theirs))
                row.compared += max(len(mine), len(theirs))
    rows = [row.summary(schedules[0][0], len(turns), reference) for row, _ in schedules]
    scaling = prefix_scaling(engine, block, options) if block > 1 else []
    report = {"model": engine.name, "device": engine.info.device, "dtype": engine.info.dtype, "block_size": block,
              "prompts": len(turns), "max_new_tokens": options.max_new_tokens, "schedules": rows, "scaling": scaling,
              "options": asdict(options)}
    report["host_overhead"] = [asdict(row) for row in engine_pass_costs(engine, block)]  # bench/passcost.py
    report["held_out"] = held_out_summary(held)
    report["targets"] = check_targets(report)
    engine.close()
    return report


def ar_overrides(engine: Engine) -> dict[str, Any]:
    """Plan overrides for true autoregressive decoding: blocks of one token, each predicted from the
    previous commit's last logits, one commit pass per token (greedy ``generate``, token for token)."""
    plan = engine.plan(block_size=1)
    if plan.block_size != 1 or not plan.logit_shift:
        raise AssertionError(f"the AR baseline must be B = 1 with the logit shift, got {plan}")
    return {"block_size": 1}


def required_grammar(engine: Engine) -> str:
    """tool_choice=required over every built-in tool, in the format the fallback tool section asks for."""
    from clovercode.engine.grammar import tool_call_grammar

    tools = [{"name": s.name, "parameters": s.parameters} for s in engine_specs()]
    return tool_call_grammar(tools, "required", "xml", engine.grammar_compiler().special)


def fastest(results: list[DecodeResult]) -> DecodeResult:
    """The quickest of identical greedy runs (their tokens must agree: decoding is deterministic)."""
    if any(r.tokens != results[0].tokens for r in results):
        raise AssertionError("greedy decoding gave different tokens on a repeat")
    return min(results, key=lambda r: r.stats.total_s)


def engine_specs():
    from clovercode.toolcalls.schemas import load_tool_specs

    return load_tool_specs()


def _record(row: ScheduleRow, result: DecodeResult, expected: str, validator: Validator) -> None:
    stats = result.stats
    row.tokens += stats.new_tokens
    row.forwards += stats.forwards
    row.prefill_s.append(stats.prefill_s)
    row.first_block_s.append(stats.first_block_s or stats.total_s)
    row.decode_s += stats.decode_s
    row.outputs.append(result.tokens)
    turn = parse_turn(result.text)
    checked = [validator.check(call, "bench") for call in turn.calls]
    if checked and not turn.errors and all(c.ok for c in checked):
        row.valid += 1
    if result.text.strip() == expected.strip():
        row.exact += 1


def prefix_scaling(engine: Engine, block: int, options: BenchOptions) -> list[dict[str, Any]]:
    """Milliseconds for one block (N denoising passes + the commit) after prompts of growing length."""
    import torch

    rows = []
    window = engine.context_window
    generator = torch.Generator().manual_seed(options.seed)
    vocab = engine.model.config.get_text_config().vocab_size
    mask = engine.plan(block_size=block).mask_id
    for length in options.lengths:
        if length + block > window:
            continue
        prompt = torch.randint(0, vocab, (length,), generator=generator).tolist()
        blk = torch.full((block,), mask, dtype=torch.long)
        timings = {}
        for name, make in (("cached", lambda: CachedDenoiser(engine.model)),
                           ("recompute", lambda: RecomputeDenoiser(engine.model))):
            samples = []
            for _ in range(3):
                denoiser = make()
                state = denoiser.prefill(prompt)
                started = time.perf_counter()
                for _ in range(options.passes_per_block):
                    denoiser.denoise(state, blk)
                denoiser.commit(state, blk)
                samples.append(time.perf_counter() - started)
            timings[name] = min(samples)  # the least disturbed run
        rows.append({"prompt_tokens": length, "cached_ms": round(1000 * timings["cached"], 2),
                     "recompute_ms": round(1000 * timings["recompute"], 2),
                     "ratio": round(timings["cached"] / timings["recompute"], 4)})
    return rows


def check_targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with the figure reached and whether it is met."""
    rows = {r["schedule"]: r for r in report["schedules"]}
    pick = next((r for name, r in rows.items() if name.startswith("threshold 0.9 B=")), None)
    checks = []
    if pick is not None:
        checks += [
            {"target": "tokens per forward at threshold 0.9 ≥ 2.0", "value": pick["tokens_per_forward"],
             "met": pick["tokens_per_forward"] >= TARGETS["tokens_per_forward"]},
            {"target": "valid calls at threshold 0.9 ≥ 90 %", "value": pick["valid_calls"],
             "met": pick["valid_calls"] >= TARGETS["valid"]},
            {"target": "agreement with one-token-per-pass ≥ 95 %", "value": pick["agreement"],
             "met": (pick["agreement"] or 0) >= TARGETS["agreement"]},
            {"target": "tokens/s at threshold 0.9 ≥ 3× autoregressive (B = 1)", "value": pick["speedup"],
             "met": (pick["speedup"] or 0) >= TARGETS["speedup"]},
        ]
    for name, row in rows.items():
        free = rows.get(name[: -len(GRAMMAR)]) if name.endswith(GRAMMAR) else None
        if free is not None and free["tokens_per_s"]:
            ratio = round(row["tokens_per_s"] / free["tokens_per_s"], 3)
            checks += [{"target": f"{name}: tokens/s ≥ 0.9× unconstrained", "value": ratio,
                        "met": ratio >= TARGETS["grammar_speed"]},
                       {"target": f"{name}: exact calls unchanged or better", "value": row["exact_calls"],
                        "met": row["exact_calls"] >= free["exact_calls"]}]
    checks += [{"target": f"host overhead per pass, {row['schedule']}, ≤ {PASS_TARGET_US:g} µs", "value": row["per_pass_us"],
                "met": row["per_pass_us"] <= PASS_TARGET_US} for row in report.get("host_overhead", [])]
    longest = report["scaling"][-1] if report["scaling"] else None
    if longest is not None:
        checks.append({"target": f"cached block cost at {longest['prompt_tokens']} prompt tokens ≤ 1/5 of recomputing",
                       "value": longest["ratio"], "met": longest["ratio"] <= TARGETS["block_cost_ratio"]})
    return checks


def render_report(report: dict[str, Any], console: Console) -> None:
    console.print(f"[bold]clovercode bench engine[/] · {report['model']} · {report['device']} {report['dtype']} · "
                  f"{report['prompts']} held-out prompts · ≤{report['max_new_tokens']} new tokens", highlight=False)
    if "held_out" in report:
        console.print(held_out_line(report["held_out"]), highlight=False, soft_wrap=True)
    table = Table(title="Decoding schedules (every forward after prefill counted)")
    columns = [("schedule", "schedule"), ("prefill ms", "prefill_ms"), ("1st block ms", "first_block_ms"),
               ("tok/s", "tokens_per_s"), ("tok/fwd", "tokens_per_forward"), ("fwd", "forwards"),
               ("agree", "agreement"), ("valid", "valid_calls"), ("exact", "exact_calls"), ("× AR", "speedup")]
    for title, _ in columns:
        table.add_column(title, justify="left" if title == "schedule" else "right")
    for row in report["schedules"]:
        table.add_row(*[_cell(row[key], key) for _, key in columns])
    console.print(table)
    headline = headline_line(report["schedules"])
    if headline:
        console.print(headline, highlight=False, soft_wrap=True)
    if report["scaling"]:
        scaling = Table(title=f"One block ({report['options']['passes_per_block']} denoising passes + commit) "
                              "vs prompt length")
        for title in ("prompt tokens", "cached ms", "recompute ms", "cached / recompute"):
            scaling.add_column(title, justify="right")
        for row in report["scaling"]:
            scaling.add_row(str(row["prompt_tokens"]), f"{row['cached_ms']:.1f}", f"{row['recompute_ms']:.1f}",
                            f"{row['ratio']:.3f}")
        console.print(scaling)
    for row in report.get("host_overhead", []):
        console.print(f"  host overhead per pass ({row['schedule']}, no model, {row['tokens']} tokens): "
                      f"{row['per_pass_us']:.1f} µs (target ≤ {PASS_TARGET_US:g} µs)", highlight=False)
    for check in report["targets"]:
        mark = "[green]met[/]" if check["met"] else "[red]not met[/]"
        console.print(f"  {mark}  {check['target']}: {check['value']}", highlight=False)


def held_out_line(held: dict[str, Any]) -> str:
    """Which eval turns were left out because they can occur in the training data, and why."""
    if not held["excluded"]:
        return f"Held-out prompts: {held['kept']} drawn, none of them can occur in the training data."
    why = "; ".join(f"{entry['count']} {reason} (e.g. “{entry['example']}”)" for reason, entry in held["reasons"].items())
    return (f"Held-out prompts: {held['kept']} kept of {held['drawn']} drawn from the eval split; "
            f"{held['excluded']} excluded as they can occur in the training data: {why}.")


def headline_line(rows: list[dict[str, Any]]) -> str:
    """The speed-up over true autoregressive decoding, with the exact-call rates of both."""
    by_name = {r["schedule"]: r for r in rows}
    pick = next((r for name, r in by_name.items() if name.startswith("threshold 0.9 B=")), None)
    ar = by_name.get(AR)
    if pick is None or ar is None or pick["speedup"] is None:
        return ""
    return (f"[bold]{pick['schedule']}: {pick['speedup']:.2f}× the tokens/s of autoregressive decoding (B = 1)[/], "
            f"exact calls {100 * pick['exact_calls']:.1f} % vs {100 * ar['exact_calls']:.1f} %, "
            f"valid {100 * pick['valid_calls']:.1f} % vs {100 * ar['valid_calls']:.1f} %.")


def _cell(value: Any, key: str) -> str:
    if value is None:
        return "—"
    if key in ("agreement", "valid_calls", "exact_calls"):
        return f"{100 * value:.1f} %"
    if key == "speedup":
        return f"{value:.2f}×"
    return str(value)


def parse_floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def parse_ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def options_from(values: dict[str, Any]) -> BenchOptions:
    return BenchOptions(**{k: v for k, v in values.items() if v is not None})


__all__: Sequence[str] = ("BenchOptions", "run_engine_bench", "render_report")

"""llguidance vs xgrammar on this machine, for docs/engine.md (Constrained decoding).

Not part of the product: xgrammar is not a dependency (``pip install xgrammar`` first). Both get the
same work, in Hermes JSON form (a JSON Schema per tool), so neither needs clovercode's own grammar:

* compile: every built-in tool schema (tools/*.json) compiled for the tokenizer, from a cold
  start (tokenizer set-up timed apart); llguidance compiles lazily, so its first mask is included;
* mask: the mean time of one next-token mask while walking a valid call token by token;
* check: how a diffusion block's run of tokens is checked left to right and undone.

    .venv/bin/python scripts/compare_grammar_libs.py [--model clover-tiny|smollm2-demo]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="clover-tiny")
    args = parser.parse_args()

    from rich.console import Console

    from clovercode.engine.config import EngineConfig
    from clovercode.engine.engine import Engine
    from clovercode.toolcalls.schemas import load_tool_specs

    engine = Engine.open(args.model, EngineConfig(), Console(stderr=True))
    tok, vocab = engine.tokenizer, int(engine.model.config.get_text_config().vocab_size)
    specs = load_tool_specs()
    calls = [json.dumps({"path": "pkg/mod.py", "start_line": 12, "end_line": 40}),
             json.dumps({"command": "python -m pytest -q tests/test_ranges.py", "timeout": 60})]
    names = ["view_file", "run_command"]
    schemas = {s.name: s.parameters for s in specs}
    print(f"model {args.model}: vocabulary {vocab}")
    for name, run in (("llguidance", _llguidance), ("xgrammar", _xgrammar)):
        try:
            result = run(tok, vocab, schemas, [(n, c) for n, c in zip(names, calls)], engine)
        except ImportError as exc:
            print(f"{name}: not installed ({exc})")
            continue
        print(f"{name}: tokenizer {result['tokenizer_ms']:.1f} ms · compile {len(schemas)} schemas "
              f"{result['compile_ms']:.1f} ms · mask mean {result['mask_us']:.0f} µs "
              f"(median {result['mask_median_us']:.0f}) over {result['masks']} tokens · {result['check']}")


def _llguidance(tok, vocab, schemas, calls, engine):
    import llguidance.hf
    import llguidance.torch
    from llguidance import LLMatcher

    started = time.perf_counter()
    lltok = llguidance.hf.from_tokenizer(tok, n_vocab=vocab)
    tokenizer_ms = 1000 * (time.perf_counter() - started)
    bits = llguidance.torch.allocate_token_bitmask(1, vocab)
    started = time.perf_counter()
    matchers = {}
    for name, schema in schemas.items():
        matchers[name] = LLMatcher(lltok, LLMatcher.grammar_from_json_schema(schema), log_level=0)
        llguidance.torch.fill_next_token_bitmask(matchers[name], bits, 0)  # compiling is lazy: force it
    compile_ms = 1000 * (time.perf_counter() - started)
    times = []
    for name, call in calls:
        matcher = LLMatcher(lltok, LLMatcher.grammar_from_json_schema(schemas[name]), log_level=0)
        ids = engine.encode(call)
        assert matcher.validate_tokens(ids) == len(ids)  # a whole run checked, nothing consumed
        for token in ids:
            t0 = time.perf_counter()
            llguidance.torch.fill_next_token_bitmask(matcher, bits, 0)
            times.append(time.perf_counter() - t0)
            assert matcher.consume_token(token)
    return {"tokenizer_ms": tokenizer_ms, "compile_ms": compile_ms, "mask_us": 1e6 * statistics.mean(times),
            "mask_median_us": 1e6 * statistics.median(times), "masks": len(times),
            "check": "validate_tokens(run) checks a run without consuming it"}


def _xgrammar(tok, vocab, schemas, calls, engine):
    import xgrammar as xgr

    started = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab)
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    tokenizer_ms = 1000 * (time.perf_counter() - started)
    started = time.perf_counter()
    compiled = {name: compiler.compile_json_schema(json.dumps(schema)) for name, schema in schemas.items()}
    compile_ms = 1000 * (time.perf_counter() - started)
    bits = xgr.allocate_token_bitmask(1, vocab)
    times = []
    for name, call in calls:
        matcher = xgr.GrammarMatcher(compiled[name], max_rollback_tokens=64)
        ids = engine.encode(call)
        accepted = 0  # a run is checked by accepting token by token, then rolled back
        for token in ids:
            if not matcher.accept_token(token):
                break
            accepted += 1
        matcher.rollback(accepted)
        assert accepted == len(ids)
        for token in ids:
            t0 = time.perf_counter()
            matcher.fill_next_token_bitmask(bits)
            times.append(time.perf_counter() - t0)
            assert matcher.accept_token(token)
    return {"tokenizer_ms": tokenizer_ms, "compile_ms": compile_ms, "mask_us": 1e6 * statistics.mean(times),
            "mask_median_us": 1e6 * statistics.median(times), "masks": len(times),
            "check": "accept_token one by one, then rollback(n) (bounded by max_rollback_tokens)"}


if __name__ == "__main__":
    main()

"""Host overhead per pass, the current decode loop against the one at an older commit, in one run.

    .venv/bin/python scripts/compare_passcost.py [--before 074d57a] [--tokens 256,2048] [--repeats 5]

The older loop is loaded from git (its decoder, sampler and stops modules, at ``--before``) into
modules of its own, so it is callable here without living in the product. Both run the same
stand-in denoiser (clovercode/bench/passcost.py: precomputed logits, no model) with clover-tiny's
tokenizer and vocabulary, interleaved, so machine load hits them alike.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OLD_MODULES = ("stops", "sampler", "decoder")  # in import order: the decoder imports the other two


def old_decode(rev: str):
    """The ``decode`` function of clovercode/engine/decoder.py at ``rev``, with that commit's sampler and stops."""
    loaded: dict[str, types.ModuleType] = {}
    for name in OLD_MODULES:
        source = subprocess.run(["git", "show", f"{rev}:clovercode/engine/{name}.py"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout
        for earlier, module in loaded.items():  # point its imports at the old siblings
            source = source.replace(f"from clovercode.engine.{earlier} import", f"from _old_{earlier} import")
        module = types.ModuleType(f"_old_{name}")
        sys.modules[module.__name__] = module
        exec(compile(source, f"{rev}:{name}.py", "exec"), module.__dict__)
        loaded[name] = module
    return loaded["decoder"].decode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="074d57a")
    parser.add_argument("--tokens", default="256,2048", help="output lengths (comma-separated)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from rich.console import Console

    from clovercode.bench.passcost import measure, plain_tokens
    from clovercode.engine.config import EngineConfig
    from clovercode.engine.decoder import decode
    from clovercode.engine.engine import Engine

    engine = Engine.open("clover-tiny", EngineConfig(dtype="float32"), Console(stderr=True))
    vocab = int(engine.model.config.get_text_config().vocab_size)
    tokens = [t for t in plain_tokens(engine.tokenizer) if t < vocab]
    block = engine.block_size()
    mask = engine.plan().mask_id
    before = old_decode(args.before)
    print(f"host overhead per forward (µs), clover-tiny tokenizer, V = {vocab}, B = {block}; "
          f"before = {args.before}, after = working tree")
    for count in (int(x) for x in args.tokens.split(",")):
        results = {}
        for label, fn in (("before", before), ("after", decode), ("before ", before), ("after ", decode)):
            rows = measure(fn, engine.detokenize, engine.info.eos_ids, tokens, vocab, mask, block, count, args.repeats)
            for row in rows:
                key = (label.strip(), row.schedule)
                results[key] = min(results.get(key, row.per_pass_us), row.per_pass_us)
                results[("forwards", row.schedule, label.strip())] = row.forwards
        for schedule in ("AR B=1", f"threshold 0.9 B={block}"):
            old, new = results[("before", schedule)], results[("after", schedule)]
            print(f"  {count:5d} tokens  {schedule:22s} before {old:8.1f}  after {new:8.1f}  ({old / new:.1f}×; "
                  f"forwards {results[('forwards', schedule, 'before')]} / {results[('forwards', schedule, 'after')]})")


if __name__ == "__main__":
    main()

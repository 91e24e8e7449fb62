"""``clovercode bench attempts``: one recorded task (a tiny project, its issue, its unittest suite) fixed
by ``fix --attempts N`` for N = 1, 2, 4 on one open model, the attempts' turns decoded together by the
slot scheduler (front/fixattempts.py). It reports each size's wall time, generated tokens and model
forwards per token (the forward hook of bench/subagents.py: a batched forward counts once however many
attempts it serves), and prints, last, ``4 attempts vs 1: wall R×, forwards per token F``: the price
of four attempts against one (4× would be no sharing at all).
"""

from __future__ import annotations

import io
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from clovercode.bench.subagents import ForwardCounter

SIZES = (1, 2, 4)
PROJECT = {
    "calc.py": "def add(a, b):\n    return a - b  # bug\n",
    "test_calc.py": "import unittest\n\nfrom calc import add\n\n\nclass CalcTest(unittest.TestCase):\n"
                    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
}
ISSUE = "add() subtracts: add(2, 3) gives -1 instead of 5"
GIT_ID = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid",
          "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid"}


def _project(root: Path) -> None:
    for rel, text in PROJECT.items():
        (root / rel).write_text(text)
    env = {**os.environ, **GIT_ID}
    for args in (("init", "-q", "-b", "main"), ("add", "-A"), ("commit", "-q", "-m", "start")):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=env)


def run_bench(backend: Any, cfg: Any, sizes: tuple[int, ...] = SIZES,
              say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Each size on a fresh copy of the project, the model kept open between them."""
    from clovercode.fixflow.plan import FixRequest, make_plan
    from clovercode.front.fixattempts import run_attempts

    counter = ForwardCounter(backend)
    rows = []
    with tempfile.TemporaryDirectory(prefix="clovercode-bench-attempts-") as tmp:
        for n in sizes:
            root = Path(tmp) / f"n{n}"
            root.mkdir()
            _project(root)
            sized = cfg.with_overrides({"fix.attempts": n, "approval": "full-auto",
                                        "trajectory_dir": str(Path(tmp) / "trajectories")}, "bench attempts")
            request = FixRequest(issue_text=ISSUE, commit=True, author="bench <bench@example.invalid>")
            plan = make_plan(root, sized, request, os.environ)
            forget = getattr(backend, "forget_prompts", None)
            if forget is not None:  # a prompt kept from the last size would favour this one
                forget()
            before, started = counter.count, time.perf_counter()
            outcome = run_attempts(root, sized, request, plan, Console(file=io.StringIO()), os.environ, None, backend)
            seconds = time.perf_counter() - started
            tokens = outcome.completion_tokens
            forwards = counter.count - before
            row = {"n": n, "seconds": round(seconds, 3), "tokens": tokens, "forwards": forwards if counter.available else None,
                   "forwards_per_token": round(forwards / tokens, 3) if counter.available and tokens else None,
                   "verdicts": [a["verdict"] for a in outcome.attempts]}
            rows.append(row)
            say(format_row(row))
    return {"model": getattr(backend, "name", "model"), "sizes": list(sizes), "rows": rows,
            "max_steps": cfg["max_steps"], "max_new_tokens": cfg["max_new_tokens"], "ok": bool(rows)}


HEADER = "   N  wall s  tokens  forwards  fwd/token  verdicts"


def format_row(row: dict[str, Any]) -> str:
    fwd = "n/a" if row["forwards"] is None else str(row["forwards"])
    per = "n/a" if row["forwards_per_token"] is None else f"{row['forwards_per_token']:.3f}"
    return f"{row['n']:>4}  {row['seconds']:>6.2f}  {row['tokens']:>6}  {fwd:>8}  {per:>9}  {', '.join(row['verdicts'])}"


def final_line(report: dict[str, Any], n: int = 4) -> str:
    rows = {r["n"]: r for r in report["rows"]}
    one, many = rows.get(1), rows.get(n) or report["rows"][-1]
    ratio = f"{many['seconds'] / one['seconds']:.2f}" if one and one["seconds"] else "n/a"
    per = "n/a" if many["forwards_per_token"] is None else f"{many['forwards_per_token']:.3f}"
    return f"{many['n']} attempts vs 1: wall {ratio}×, forwards per token {per}"

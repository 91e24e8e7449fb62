"""``clovercode bench subagents``: N read-only children on the same subtasks, run one after another
and batched (the task tool's own path: children's loops on threads, their turns decoded together by
the slot scheduler on the model's thread), the two interleaved in one run for N = 1, 2, 4, 8.

It reports the wall time of each, their ratio, the model forwards per generated token (counted by a
hook on the model's forward, so a batched forward counts once however many children it serves) and
whether every child's outcome is the same both ways (greedy decoding: it must be). The last line is
``batched vs sequential (N=4): R×``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from clovercode.actions.context import Observation, approve_all, no_checkpoint
from clovercode.actions.fileio import DiskFiles
from clovercode.actions.guards import FileGuard
from clovercode.agent.budget import Limits
from clovercode.backends.base import GenerationParams
from clovercode.subagents.child import ChildTask, Parent
from clovercode.subagents.rights import READ_TOOLS
from clovercode.subagents.tool import TaskTool

SIZES = (1, 2, 4, 8)
PROJECT = {
    "app/config.py": "def parse_config(text):\n    pairs = [line.split('=', 1) for line in text.splitlines() if '=' in line]\n"
                     "    return {k.strip(): v.strip() for k, v in pairs}\n",
    "app/server.py": "from app.config import parse_config\n\n\ndef start(path):\n    return parse_config(open(path).read())\n",
    "app/util.py": "def slug(text):\n    return '-'.join(text.lower().split())\n",
    "docs/usage.md": "# Usage\nRun `python -m app.server config.ini`.\n",
    "tests/test_config.py": "from app.config import parse_config\n\n\ndef test_pairs():\n    assert parse_config('a=1') == {'a': '1'}\n",
}
SUBTASKS = [
    ("find parse_config", "Find where parse_config is defined and say what it returns."),
    ("list docs", "List the files in docs/ and summarise what they cover."),
    ("read server", "Read app/server.py and say what start() does."),
    ("find slug", "Find the function slug and report its file and line."),
    ("tests of config", "Which tests cover app/config.py? Name them."),
    ("callers of parse_config", "Search for every caller of parse_config."),
    ("read util", "Show what app/util.py defines."),
    ("project layout", "List the top-level directories and say what each holds."),
]


def _project(root: Path) -> None:
    for rel, text in PROJECT.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


class ForwardCounter:
    """Calls of the model's top-level forward: one per prefill, denoising pass or commit, batched or not."""

    def __init__(self, backend: Any):
        self.count = 0
        model = getattr(getattr(backend, "engine", None), "model", None)
        self.handle = model.register_forward_hook(self._hook) if hasattr(model, "register_forward_hook") else None

    def _hook(self, *_: Any) -> None:
        self.count += 1

    @property
    def available(self) -> bool:
        return self.handle is not None


def _outcome_key(observation: Observation) -> tuple[Any, ...]:
    data = observation.data
    body = observation.text.split("\n", 1)[1] if "\n" in observation.text else ""
    return (data.get("stop_reason"), data.get("steps"), (data.get("usage") or {}).get("completion_tokens"), body)


class Bench:
    def __init__(self, backend: Any, cfg: Any, root: Path, max_steps: int):
        self.backend, self.cfg, self.root = backend, cfg, root
        params = GenerationParams(max_new_tokens=cfg["max_new_tokens"], temperature=0.0, thinking=False,
                                  stop=("</tool_call>",))
        self.parent = Parent(root, cfg, {"HOME": str(root)}, None, approve_all, no_checkpoint, FileGuard(), DiskFiles(),
                             None, None, params, root / ".trajectories", "bench")
        self.limits = Limits(max_steps=max_steps)
        self.numbers = iter(range(1, 1 << 30))

    def tasks(self, n: int) -> list[ChildTask]:
        return [ChildTask(next(self.numbers), f"c{i}", d, p, None, (), False, (*READ_TOOLS,), self.limits)
                for i, (d, p) in enumerate(SUBTASKS[:n])]

    def sequential(self, n: int) -> list[Observation]:
        """Each child alone: one task call per turn, one turn after another."""
        return [self.group([task])[0] for task in self.tasks(n)]

    def batched(self, n: int) -> list[Observation]:
        """All ``n`` task calls in one turn: the children run at once, their turns decoded together."""
        return self.group(self.tasks(n))

    def group(self, tasks: list[ChildTask]) -> list[Observation]:
        """The task tool's own path (TaskTool.run_group) for these calls."""
        from clovercode.actions.context import ToolContext
        from clovercode.executors.local import LocalExecutor

        tool = TaskTool(self.parent, self.backend, {}, self.limits)
        calls = [_Call(t.call_id, {"description": t.description, "prompt": t.prompt}) for t in tasks]
        return tool.run_group(ToolContext(self.root, LocalExecutor()), calls)


class _Call:
    def __init__(self, id: str, arguments: dict[str, Any]):
        self.id, self.arguments = id, arguments


def run_bench(backend: Any, cfg: Any, sizes: tuple[int, ...] = SIZES, repeats: int = 2, max_steps: int = 2,
              say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="clovercode-bench-subagents-") as tmp:
        root = Path(tmp)
        _project(root)
        bench = Bench(backend, cfg, root, max_steps)
        counter = ForwardCounter(backend)
        bench.sequential(1)  # warm-up: first-call costs belong to neither side
        rows = []
        for n in sizes:
            times: dict[str, list[float]] = {"sequential": [], "batched": []}
            forwards: dict[str, int] = {}
            tokens: dict[str, int] = {}
            keys: dict[str, list[tuple[Any, ...]]] = {}
            for repeat in range(repeats):
                order = ("sequential", "batched") if repeat % 2 == 0 else ("batched", "sequential")
                for mode in order:  # interleaved: drifting load hits both sides alike
                    forget = getattr(backend, "forget_prompts", None)
                    if forget is not None:  # the same subtasks again: a kept prompt would favour the second side
                        forget()
                    before = counter.count
                    started = time.perf_counter()
                    observations = getattr(bench, mode)(n)
                    times[mode].append(time.perf_counter() - started)
                    forwards[mode] = counter.count - before
                    tokens[mode] = sum((o.data.get("usage") or {}).get("completion_tokens", 0) for o in observations)
                    keys[mode] = [_outcome_key(o) for o in observations]
            row = {"n": n, "sequential_s": round(statistics.median(times["sequential"]), 3),
                   "batched_s": round(statistics.median(times["batched"]), 3),
                   "tokens": tokens["batched"], "same_outputs": keys["sequential"] == keys["batched"]}
            row["ratio"] = round(row["sequential_s"] / row["batched_s"], 2) if row["batched_s"] else None
            for mode in ("sequential", "batched"):
                row[f"{mode}_forwards_per_token"] = (round(forwards[mode] / tokens[mode], 3)
                                                     if counter.available and tokens[mode] else None)
            rows.append(row)
            say(format_row(row))
    return {"model": getattr(backend, "name", "model"), "sizes": list(sizes), "repeats": repeats,
            "max_steps": max_steps, "max_new_tokens": cfg["max_new_tokens"], "rows": rows,
            "ok": all(r["same_outputs"] for r in rows)}


HEADER = "   N  sequential s  batched s  ratio  fwd/token seq  fwd/token batched  same outputs"


def format_row(row: dict[str, Any]) -> str:
    def f(value: Any, digits: int) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    return (f"{row['n']:>4}  {row['sequential_s']:>12.2f}  {row['batched_s']:>9.2f}  {f(row['ratio'], 2):>5}  "
            f"{f(row['sequential_forwards_per_token'], 3):>13}  {f(row['batched_forwards_per_token'], 3):>17}  "
            f"{'yes' if row['same_outputs'] else 'NO'}")


def final_line(report: dict[str, Any], n: int = 4) -> str:
    row = next((r for r in report["rows"] if r["n"] == n), report["rows"][-1])
    return f"batched vs sequential (N={row['n']}): {row['ratio']}×"

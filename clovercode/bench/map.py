"""``clovercode bench map``: cold and warm repo-map time and peak memory on a large real tree.

Each measurement runs in a fresh interpreter (so peak memory is its own): cold with an empty tag
cache, warm with the cache the cold run left, then warm again after one file changed. The default
tree is this Python's standard library, copied into a fresh git repository (the stdlib usually sits
in a directory git ignores, and the map reads git's view of a project)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

COLD_TARGET_S = 15.0
WARM_TARGET_S = 1.0
COPY_SKIP = ("site-packages", "dist-packages", "__pycache__", ".git")


@dataclass
class Run:
    label: str
    data: dict[str, Any]
    wall: float


def default_tree() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def prepare_copy(source: Path, target: Path) -> None:
    """A git repository at ``target`` holding ``source``'s files (index only: no commit needed)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*COPY_SKIP), symlinks=True)
    for args in (["init", "-q"], ["add", "-A"]):
        subprocess.run(["git", "-C", str(target), *args], check=True, capture_output=True)


def measure(root: Path, cache_dir: Path, tokens: int, jobs: int, label: str) -> Run:
    from clovercode.context.worker import python_argv

    started = time.perf_counter()
    proc = subprocess.run(python_argv("clovercode.bench.map", "--child", str(root), str(cache_dir), str(tokens),
                                      str(jobs)), capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"bench child failed ({label}):\n{proc.stderr[-2000:]}")
    return Run(label, json.loads(proc.stdout.strip().splitlines()[-1]), wall)


def child(root: Path, cache_dir: Path, tokens: int, jobs: int) -> dict[str, Any]:
    """One map, measured inside this process: index (select, cache, parse) and rank + fit."""
    from clovercode.context.index import IndexOptions, build_index
    from clovercode.context.repomap import make_repo_map

    started = time.perf_counter()
    index = build_index(root, IndexOptions(cache_dir, jobs=jobs))
    indexed = time.perf_counter()
    repo_map = make_repo_map(index, tokens)
    done = time.perf_counter()
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"index_s": indexed - started, "rank_fit_s": done - indexed, "map_s": done - started,
            "peak_mib": own, "worker_peak_mib": workers, "files": index.stats.files, "parsed": index.stats.parsed,
            "cached": index.stats.cached, "definitions": repo_map.total, "shown": repo_map.shown,
            "tokens": repo_map.tokens}


def run_bench(path: Path | None, tokens: int, jobs: int, echo: Callable[[str], None]) -> int:
    """Print the table; exit status 1 when a target is missed (so CI can notice)."""
    with tempfile.TemporaryDirectory(prefix="clovercode-bench-map-") as tmp:
        work = Path(tmp)
        if path is None:
            source = default_tree()
            root = work / "tree"
            echo(f"tree: copy of {source} (without site-packages, __pycache__) as a git repository")
            prepare_copy(source, root)
            copied = True
        else:
            root, copied = path.resolve(), False
            echo(f"tree: {root}")
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        echo(f"machine: {cores} CPU cores available; jobs={jobs or 'auto'}; map budget {tokens} tokens")
        cache = work / "cache"
        runs = [measure(root, cache, tokens, jobs, "cold (empty cache)"),
                measure(root, cache, tokens, jobs, "warm (cache hit)")]
        if copied:
            _touch_one(root)
            runs.append(measure(root, cache, tokens, jobs, "warm, one file edited"))
    first = runs[0].data
    echo(f"files read by the map: {first['files']}, definitions: {first['definitions']}, "
         f"map: {first['shown']} definitions in {first['tokens']} tokens")
    echo(f"{'run':<24}{'map s':>8}{'index s':>9}{'rank+fit s':>11}{'process s':>11}{'parsed':>8}{'peak MiB':>10}{'workers MiB':>12}")
    for run in runs:
        d = run.data
        echo(f"{run.label:<24}{d['map_s']:>8.2f}{d['index_s']:>9.2f}{d['rank_fit_s']:>11.2f}{run.wall:>11.2f}"
             f"{d['parsed']:>8}{d['peak_mib']:>10.0f}{d['worker_peak_mib']:>12.0f}")
    cold, warm = runs[0].data["map_s"], runs[1].data["map_s"]
    echo(f"cold / warm: {cold / warm:.1f}x")
    cold_ok, warm_ok = cold <= COLD_TARGET_S, warm <= WARM_TARGET_S
    echo(f"target cold ≤ {COLD_TARGET_S:g} s: {'met' if cold_ok else 'MISSED'} ({cold:.2f} s, {cold / COLD_TARGET_S:.0%} of it)")
    echo(f"target warm ≤ {WARM_TARGET_S:g} s: {'met' if warm_ok else 'MISSED'} ({warm:.2f} s, {warm / WARM_TARGET_S:.0%} of it)")
    return 0 if cold_ok and warm_ok else 1


def _touch_one(root: Path) -> None:
    """Append a comment to one mid-sized Python file, the way an edit would change it."""
    for path in sorted(root.rglob("*.py")):
        if 2000 < path.stat().st_size < 20000:
            with path.open("a", encoding="utf-8") as handle:
                handle.write("\n# edited by clovercode bench map\n")
            return


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "--child":
    print(json.dumps(child(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))))

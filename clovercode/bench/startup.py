"""``clovercode bench startup``: how long the paths that must answer quickly take, in interleaved runs
of real processes (so a machine that slows down slows all three alike):

- ``--version``: the process's whole run;
- ``exec --json`` with a replay model: from the start to its first event (``run_started``);
- ``acp``: from the start to the answer to ``initialize`` (answered before the SDK has loaded:
  front/acp/early.py), and to the answer to the ``session/new`` sent on it (the SDK loaded, a session
  opened: what an editor waits for before its first prompt; no target, shown so that it is seen).

Medians against the targets of issue 49 (2 idle cores: 0.15 s, 0.25 s, 0.3 s). What each path imports
is held by tests/test_startup_imports.py; the seconds are here, since times are noise in a unit test.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

TARGETS: dict[str, float | None] = {"--version": 0.15, "exec --json, first event": 0.25,
                                    "acp initialize answered": 0.3, "acp session/new answered": None}
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": 1, "clientCapabilities": {}}}) + "\n"


def _first_line(argv: list[str], cwd: Path, env: dict[str, str], stdin: str | None = None,
                timeout: float = 60) -> float:
    """Seconds from the start of ``argv`` to its first line on stdout; the process is then ended."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        if stdin is not None:
            assert proc.stdin is not None
            proc.stdin.write(stdin)
            proc.stdin.flush()
        assert proc.stdout is not None
        line = proc.stdout.readline()
        seconds = time.perf_counter() - started
        if not line:
            raise RuntimeError(f"{' '.join(argv[2:4])} wrote nothing")
        return seconds
    finally:
        proc.kill()
        proc.wait(timeout=timeout)


def _session_opened(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 60) -> float:
    """Seconds from the start of ``acp`` to its answer to ``session/new``, sent once initialize is answered."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    new = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(cwd), "mcpServers": []}})
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(INITIALIZE)
        proc.stdin.flush()
        proc.stdout.readline()
        proc.stdin.write(new + "\n")
        proc.stdin.flush()
        for line in proc.stdout:
            if json.loads(line).get("id") == 2:
                return time.perf_counter() - started
        raise RuntimeError("acp did not answer session/new")
    finally:
        proc.kill()
        proc.wait(timeout=timeout)


def measure(runs: int, python: str = sys.executable) -> dict[str, list[float]]:
    """``runs`` interleaved rounds of the three paths, each in a scratch project with its own home."""
    with tempfile.TemporaryDirectory(prefix="clovercode-startup-") as scratch:
        root = Path(scratch)
        project, home = root / "project", root / "home"
        project.mkdir()
        home.mkdir()
        (project / "a.py").write_text("x = 1\n")
        replay = root / "answer.jsonl"
        replay.write_text(json.dumps({"text": "Nothing to change."}) + "\n")
        env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / "state"),
               "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache")}
        paths: dict[str, Callable[[], float]] = {
            "--version": lambda: _whole([python, "-m", "clovercode", "--version"], project, env),
            "exec --json, first event": lambda: _first_line(
                [python, "-m", "clovercode", "exec", "--json", "--model", f"replay:{replay}", "say hi"], project, env),
            "acp initialize answered": lambda: _first_line(
                [python, "-m", "clovercode", "acp", "--model", f"replay:{replay}"], project, env, stdin=INITIALIZE),
            "acp session/new answered": lambda: _session_opened(
                [python, "-m", "clovercode", "acp", "--model", f"replay:{replay}"], project, env),
        }
        for measure_once in paths.values():  # one warm-up each: the OS's file cache, bytecode
            measure_once()
        seconds: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(runs):
            for name, measure_once in paths.items():
                seconds[name].append(measure_once())
        return seconds


def _whole(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=True, timeout=60)
    return time.perf_counter() - started


def report(seconds: dict[str, list[float]]) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = [f"start-up, {len(next(iter(seconds.values())))} interleaved runs each, {os.cpu_count()} cores, "
            f"load average {load:.1f} (the targets are for an idle machine)"]
    for name, values in seconds.items():
        median, target = statistics.median(values), TARGETS[name]
        verdict = "no target" if target is None else f"target {target:.2f} s  {'met' if median <= target else 'missed'}"
        rows.append(f"{name:<26} median {median:.3f} s  (min {min(values):.3f}, max {max(values):.3f})  {verdict}")
    return "\n".join(rows)

"""The decoding core of ``bench subagents``, for machines without the agent loop's dependencies (the
GPU check's image has torch, transformers and rich only): N children's turns on the same subtasks,
each group of one after another vs all N at once through the children's shared model
(subagents/models.py: the slot scheduler on this thread, one forward for every live child)."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from clovercode.backends.base import GenerationParams, TextDelta, Usage
from clovercode.ground.messages import Message
from clovercode.subagents.models import SharedModel

SYSTEM = ("You are a subagent: another agent handed you one subtask and reads only your final report. "
          "Use the tools to look things up, then report what you found with file paths.")
SUBTASKS = ("Find where parse_config is defined and say what it returns.",
            "List the files in docs/ and summarise what they cover.",
            "Read app/server.py and say what start() does.",
            "Find the function slug and report its file and line.",
            "Which tests cover app/config.py? Name them.",
            "Search for every caller of parse_config.",
            "Show what app/util.py defines.",
            "List the top-level directories and say what each holds.")


def count_forwards(backend: Any) -> list[int]:
    """A one-element list the model's forward hook counts into (empty when the model has no hook)."""
    counter = [0]
    model = getattr(getattr(backend, "engine", None), "model", None)
    if not hasattr(model, "register_forward_hook"):
        return []
    model.register_forward_hook(lambda *_: counter.__setitem__(0, counter[0] + 1))
    return counter


def _group(backend: Any, conversations: list[list[Message]], params: GenerationParams) -> list[tuple[str, int]]:
    """Every conversation's turn, decoded at once; → (text, completion tokens) each."""
    shared = SharedModel(backend, len(conversations))
    out: dict[int, tuple[str, int]] = {}
    finished, left, lock = threading.Event(), [len(conversations)], threading.Lock()

    def child(index: int) -> None:
        try:
            parts, tokens = [], 0
            for event in shared.for_child(f"child-{index}", threading.Event()).generate(conversations[index], (), params):
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                elif isinstance(event, Usage) and event.completion_tokens:
                    tokens = event.completion_tokens
            out[index] = ("".join(parts), tokens)
        finally:
            with lock:
                left[0] -= 1
                if not left[0]:
                    finished.set()

    for index in range(len(conversations)):
        threading.Thread(target=child, args=(index,), daemon=True).start()
    try:
        shared.drive(finished)
    finally:
        shared.close()
    return [out.get(i, ("", 0)) for i in range(len(conversations))]


def decode_bench(backend: Any, sizes: tuple[int, ...] = (1, 2, 4, 8), repeats: int = 2,
                 max_new_tokens: int = 64) -> dict[str, Any]:
    params = GenerationParams(max_new_tokens=max_new_tokens, temperature=0.0, thinking=False, stop=("</tool_call>",))
    conversations = [[Message("system", SYSTEM), Message("user", s)] for s in SUBTASKS]
    counter = count_forwards(backend)
    _group(backend, conversations[:1], params)  # warm-up
    rows = []
    for n in sizes:
        times: dict[str, list[float]] = {"sequential": [], "batched": []}
        forwards: dict[str, int] = {}
        results: dict[str, list[tuple[str, int]]] = {}
        for repeat in range(repeats):
            for mode in (("sequential", "batched") if repeat % 2 == 0 else ("batched", "sequential")):
                forget = getattr(backend, "forget_prompts", None)
                if forget is not None:
                    forget()
                before = counter[0] if counter else 0
                started = time.perf_counter()
                if mode == "sequential":
                    results[mode] = [r for c in conversations[:n] for r in _group(backend, [c], params)]
                else:
                    results[mode] = _group(backend, conversations[:n], params)
                times[mode].append(time.perf_counter() - started)
                forwards[mode] = (counter[0] if counter else 0) - before
        tokens = sum(t for _, t in results["batched"])
        row: dict[str, Any] = {"n": n, "sequential_s": round(statistics.median(times["sequential"]), 3),
                               "batched_s": round(statistics.median(times["batched"]), 3), "tokens": tokens,
                               "same_outputs": results["sequential"] == results["batched"]}
        row["ratio"] = round(row["sequential_s"] / row["batched_s"], 2) if row["batched_s"] else None
        for mode in ("sequential", "batched"):
            row[f"{mode}_forwards_per_token"] = round(forwards[mode] / tokens, 3) if counter and tokens else None
        rows.append(row)
    four = next((r for r in rows if r["n"] == 4), rows[-1])
    return {"rows": rows, "max_new_tokens": max_new_tokens, "repeats": repeats,
            "same_outputs": all(r["same_outputs"] for r in rows),
            "line": f"batched vs sequential (N={four['n']}): {four['ratio']}×"}

"""Subagents on the embedded engine: the children of one turn share the batched decoder (one forward
for all live children), and each child's text is what it decodes alone, token for token."""

from __future__ import annotations

import threading

import pytest
from rich.console import Console

pytest.importorskip("torch")

from clovercode.backends.base import GenerationParams, TextDelta  # noqa: E402
from clovercode.ground.messages import Message  # noqa: E402
from clovercode.subagents.models import SharedModel  # noqa: E402
from clovercode.toolcalls.schemas import load_tool_specs  # noqa: E402

SUBTASKS = ["Find where parse_config is defined", "List the files in docs/", "Show me lines 10 to 30 of src/app.py"]


@pytest.fixture(scope="module")
def clover_tiny():
    from clovercode.backends.embedded import EmbeddedBackend
    from clovercode.engine.config import EngineConfig
    from clovercode.engine.engine import Engine

    return EmbeddedBackend(Engine.open("clover-tiny", EngineConfig(), Console(file=open("/dev/null", "w"))))


def text_of(stream) -> str:
    return "".join(e.text for e in stream if isinstance(e, TextDelta))


def test_batched_children_write_what_each_writes_alone(clover_tiny):
    specs = load_tool_specs(names=["view_file", "list_files", "search_text", "finish"])
    params = GenerationParams(max_new_tokens=48, temperature=0.0, stop=("</tool_call>",))
    conversations = [[Message("system", "You are a subagent."), Message("user", s)] for s in SUBTASKS]
    alone = [text_of(clover_tiny.generate(c, specs, params)) for c in conversations]
    shared = SharedModel(clover_tiny, 4)
    together: dict[int, str] = {}
    start = threading.Barrier(len(conversations))

    def child(index: int) -> None:
        model = shared.for_child(f"child-{index}", threading.Event())
        start.wait()
        together[index] = text_of(model.generate(conversations[index], specs, params))

    threads = [threading.Thread(target=child, args=(i,)) for i in range(len(conversations))]
    for thread in threads:
        thread.start()
    finished = threading.Event()
    threading.Thread(target=lambda: ([t.join(60) for t in threads], finished.set())).start()
    shared.drive(finished)  # the model loop on this thread, as the task tool runs it
    stats = shared.scheduler.snapshot()
    shared.close()
    assert [together[i] for i in range(len(conversations))] == alone and all(alone)
    assert stats["mean_batch"] > 1  # the children were decoded in shared forwards, not one by one


def test_the_bench_measures_both_ways_and_ends_with_the_ratio_line(tmp_path):
    from clovercode.backends.tiny import TinyBackend, TinyConfig
    from clovercode.bench.subagents import final_line, run_bench

    from clovercode.ground.config import load_config

    cfg = load_config(tmp_path, flags={"max_new_tokens": 8, "context.map_tokens": 0, "sandbox": "none",
                                       "subagents.max_parallel": 2})
    lines: list[str] = []
    report = run_bench(TinyBackend(TinyConfig(dim=16, layers=1, heads=2)), cfg, (1, 2), 1, 1, lines.append)
    assert report["ok"] and [r["n"] for r in report["rows"]] == [1, 2] and len(lines) == 2
    assert all(r["tokens"] > 0 and r["same_outputs"] for r in report["rows"])
    assert final_line(report, 4).startswith("batched vs sequential (N=2): ") and final_line(report).endswith("×")

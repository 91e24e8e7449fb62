"""``clovercode bench serve --agents``: what agents send, beside plain chat clients.

An agent's every request carries tools, so every one is grammar-constrained on the embedded engine.
The agents workload puts N tool-carrying clients (half ``tool_choice`` auto, half required, over two
small tools) beside the N plain chat clients of ``workload``; the bench then measures them as it
measures any workload (one-by-one, queued, batched), checks every batched reply, tool calls
included, against its one-by-one reply, and ends with ``agents batched vs one-by-one: R×``.
"""

from __future__ import annotations

import copy
from typing import Any

TOOLS = [
    {"type": "function", "function": {"name": "view_file", "description": "Show lines of a file.", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "start_line": {"type": "integer"}},
        "required": ["path"]}}},
    {"type": "function", "function": {"name": "run_command", "description": "Run a shell command.", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
]


def agents_workload(plain: list[list[tuple[str, dict[str, Any]]]]) -> list[list[tuple[str, dict[str, Any]]]]:
    """``plain`` (one list of requests per client) and as many agent clients again: each sends the
    same kind of request with the tools, tool_choice auto for the first half and required for the rest."""
    agents = []
    for index, jobs in enumerate(plain):
        choice = "auto" if index < len(plain) / 2 else "required"
        mine = []
        for key, body in jobs:
            body = copy.deepcopy(body)
            body.update(tools=TOOLS, tool_choice=choice, user=f"agent-{index}")
            mine.append((f"agent{index}-{key}", body))
        agents.append(mine)
    return plain + agents


def final_line(report: dict[str, Any]) -> str | None:
    """The last line of an agents run: batched throughput against one-by-one, on the same requests."""
    if not report.get("agents"):
        return None
    batched = next((row for row in report["modes"] if row["mode"] == "batched"), {})
    gain = batched.get("throughput_vs_one_at_a_time")
    return f"agents batched vs one-by-one: {gain:.2f}×" if gain else "agents batched vs one-by-one: —"

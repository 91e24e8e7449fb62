"""Chat messages (the conversation type shared by the agent loop, the model backends, the engine and serve)
and their OpenAI-style dict form for templates and servers. A neutral module: it imports nothing of clovercode,
so the engine can render conversations without knowing the agent."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CallRecord:
    id: str
    name: str
    arguments: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)}}


@dataclass(frozen=True)
class Message:
    role: str  # system | user | assistant | tool
    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[CallRecord, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None  # the tool's name on role="tool" messages
    # Kept verbatim so compaction knows what must survive (goal, instructions, file contents).
    tags: frozenset[str] = field(default_factory=frozenset)

    def to_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role == "tool":
            out["name"] = self.name
        return out

    def to_template(self) -> dict[str, Any]:
        """The dict HF chat templates expect: like OpenAI, but arguments as a mapping."""
        out = self.to_openai()
        if self.tool_calls:
            out["tool_calls"] = [{"type": "function", "id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in self.tool_calls]
        if self.reasoning and self.role == "assistant":
            out["reasoning_content"] = self.reasoning
        return out

    def to_json(self) -> dict[str, Any]:
        out = self.to_openai()
        if self.tool_calls:
            out["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls]
        if self.reasoning:
            out["reasoning"] = self.reasoning
        if self.tags:
            out["tags"] = sorted(self.tags)
        return out

    @staticmethod
    def from_json(data: dict[str, Any]) -> "Message":
        calls = tuple(CallRecord(c["id"], c["name"], dict(c.get("arguments") or {})) for c in data.get("tool_calls") or ())
        return Message(role=data["role"], content=data.get("content") or "", reasoning=data.get("reasoning", ""),
                       tool_calls=calls, tool_call_id=data.get("tool_call_id"), name=data.get("name"),
                       tags=frozenset(data.get("tags", ())))

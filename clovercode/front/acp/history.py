"""``session/load``: a saved conversation (context/resume.py) told to the client again as the updates
it would have seen: the person's tasks, the model's reasoning and words, each tool call with what it
returned. Messages only the model reads (instructions, feedback, compaction notes) are not shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from clovercode.front.acp.markdown import text_block
from clovercode.front.acp.updates import PLAN_TOOL, kind_of, locations, plan_update, title_of
from clovercode.ground.messages import Message

FAILED_PREFIXES = ("Error", "Interrupted", "Not run")  # how a failed observation's text starts (actions/toolbox.py)


def history_updates(messages: list[Message], root: Path) -> Iterator[dict[str, Any]]:
    ids: dict[str, str] = {}  # a call's id in the file -> its id for the client (unique across turns)
    plans: dict[str, Any] = {}  # a plan tool call's id -> its steps, shown once the tool took them
    for number, message in enumerate(messages):
        if message.role == "user" and "goal" in message.tags:
            yield _chunk("user_message_chunk", message.content)
        elif message.role == "assistant":
            if message.reasoning.strip():
                yield _chunk("agent_thought_chunk", message.reasoning)
            if message.content.strip():
                yield _chunk("agent_message_chunk", message.content)
            for call in message.tool_calls:
                if call.name == "finish":
                    summary = call.arguments.get("summary")
                    if isinstance(summary, str) and summary.strip():
                        yield _chunk("agent_message_chunk", summary)
                    continue
                if call.name == PLAN_TOOL:
                    plans[call.id] = call.arguments.get("plan")
                    continue
                ids[call.id] = f"h{number}-{call.id}"
                yield {"sessionUpdate": "tool_call", "toolCallId": ids[call.id], "title": title_of(call.name, call.arguments),
                       "kind": kind_of(call.name), "status": "in_progress",
                       "locations": locations(root, call.arguments), "rawInput": call.arguments}
        elif message.role == "tool" and message.tool_call_id in plans:
            update = plan_update(plans.pop(message.tool_call_id))
            if update is not None and not message.content.startswith(FAILED_PREFIXES):
                yield update
        elif message.role == "tool" and message.tool_call_id in ids:
            failed = message.content.startswith(FAILED_PREFIXES)
            yield {"sessionUpdate": "tool_call_update", "toolCallId": ids.pop(message.tool_call_id),
                   "status": "failed" if failed else "completed",
                   "content": [text_block(message.content)]}


def _chunk(kind: str, text: str) -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}

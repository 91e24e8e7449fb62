"""How the tools reach the model through a server: natively (``tools`` in the request, rendered by the
server's chat template) or in the prompt (the tool shim, as Goose does for local models).

Many small models' templates render neither ``tools`` nor earlier assistant ``tool_calls``: the model
never sees the schemas, the call syntax or its own past calls. In prompt mode the request carries no
``tools``; the schemas and the call format go into the system prompt, past calls stay in the
assistant's text and tool results come back as ``<tool_response>`` user turns (the same plain form
the embedded engine uses for templates without tools). The loop's text parser reads the calls.

``auto`` decides from the server's own token counts: two one-token requests, the same message with
and without the tools; when the prompt did not grow by a good share of the tools' size, the
template dropped them.
"""

from __future__ import annotations

from typing import Any, Sequence

from clovercode.ground.messages import Message
from clovercode.backends.endpoint_wire import estimate_prompt
from clovercode.engine.chat import plain_messages
from clovercode.toolcalls.schemas import ToolSpec

TOOL_MODES = ("native", "prompt", "auto")
# A system message too: some templates (llama-cpp-python's chatml-function-calling) put the tools
# into the system turn and show none without one.
PROBE_MESSAGES = ({"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Say OK."})
# Rendered tools cost hundreds of tokens; a template that drops them adds (almost) nothing. A
# quarter of the estimate separates the two even though the estimate errs high.
RENDERED_SHARE = 0.25


def prompt_mode_messages(messages: Sequence[Message], tools: Sequence[ToolSpec], thinking: bool) -> list[dict[str, Any]]:
    """The conversation with system / user / assistant turns only, tools described in the system prompt."""
    return [dict(m) for m in plain_messages(messages, tools, thinking)]


def wire_tool(spec: ToolSpec) -> dict[str, Any]:
    """The tool as sent to a server natively: string schemas without ``pattern`` and ``maxLength``.
    Servers turn schemas into sampling grammars, and llama.cpp's converter (llama-cpp-python 0.3)
    breaks on both: a pattern's character class becomes raw string characters (``[^\\n\\r]*`` then
    admits an unescaped quote, so the string never has to close: a small model filled the whole
    context inside one path), and ``maxLength: 1024`` becomes 1,024 nested optionals, a grammar it
    refuses and then aborts on. The validator still checks both bounds on every call."""
    tool = spec.openai_tool()
    tool["function"]["parameters"] = _without_string_bounds(tool["function"]["parameters"])
    return tool


_WIRE_DROPPED = ("pattern", "maxLength")


def _without_string_bounds(schema: Any) -> Any:
    if isinstance(schema, dict):
        string = schema.get("type") == "string"
        return {k: _without_string_bounds(v) for k, v in schema.items() if not (string and k in _WIRE_DROPPED)}
    if isinstance(schema, list):
        return [_without_string_bounds(v) for v in schema]
    return schema


def probe_body(model: str, tools: Sequence[ToolSpec] | None, tool_choice: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in PROBE_MESSAGES], "stream": False,
                            "max_tokens": 1, "temperature": 0.0}
    if tools:
        body["tools"] = [wire_tool(spec) for spec in tools]
        body["tool_choice"] = tool_choice
    return body


def tools_dropped(without: int, with_tools: int, tools: Sequence[ToolSpec]) -> bool:
    """Whether the server's prompt count shows its template left the tools out."""
    expected = estimate_prompt([], [spec.openai_tool() for spec in tools])
    return with_tools - without < RENDERED_SHARE * expected

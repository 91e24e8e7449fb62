"""MCP tools as clovercode tool specs, and MCP tool results as observation text (pure)."""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from clovercode.executors.capture import OutputCap
from clovercode.mcpservers.config import SEPARATOR
from clovercode.toolcalls.schemas import ToolSpec

# OpenAI-style function names: what every backend and chat template accepts.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def qualified_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def tool_specs(server: str, tools: Iterable[Any], taken: set[str]) -> tuple[list[tuple[ToolSpec, str]], list[str]]:
    """(spec, the server's own tool name) for each usable tool, and a warning for each left out."""
    specs, warnings = [], []
    for tool in tools:
        name = qualified_name(server, tool.name)
        if not TOOL_NAME.fullmatch(name):
            warnings.append(f"MCP server '{server}': tool '{tool.name}' is left out: '{name}' is not a usable tool "
                            "name (letters, digits, '_' and '-', at most 64)")
            continue
        if name in taken:
            warnings.append(f"MCP server '{server}': tool '{tool.name}' is left out: '{name}' is already a tool")
            continue
        if task_required(tool):
            warnings.append(f"MCP server '{server}': tool '{tool.name}' is left out: it only runs as a task "
                            "(execution.taskSupport \"required\"), which clovercode does not do, so every call would fail")
            continue
        schema = tool.input_schema if isinstance(tool.input_schema, dict) else None
        problem = schema_problem(schema)
        if problem:
            warnings.append(f"MCP server '{server}': tool '{tool.name}' is left out: its inputSchema is invalid ({problem})")
            continue
        assert schema is not None
        description = (tool.description or tool.title or "").strip()
        shown = f"{description} (tool `{tool.name}` of the MCP server '{server}')" if description \
            else f"Tool `{tool.name}` of the MCP server '{server}'."
        specs.append((ToolSpec(name=name, description=shown, schema=schema), tool.name))
        taken.add(name)
    return specs, warnings


def task_required(tool: Any) -> bool:
    """A tool that declares task-augmented execution required (MCP 2025-11-25 `execution.taskSupport`):
    a plain tools/call is refused by the server, and clovercode does not poll tasks."""
    execution = getattr(tool, "execution", None)
    support = getattr(execution, "task_support", None)
    if support is None and isinstance(execution, dict):
        support = execution.get("taskSupport", execution.get("task_support"))
    return support == "required"


def schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return "not a JSON object"
    if schema.get("type", "object") != "object":
        return f"its type is {schema.get('type')!r}, not 'object'"
    from jsonschema import Draft202012Validator  # loaded when a server's tools arrive, not at start-up
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return exc.message
    try:
        Draft202012Validator(schema).is_valid({})  # unresolvable $refs fail here, not at the first call
    except Exception as exc:  # noqa: BLE001 - jsonschema raises many kinds for broken references
        return f"{type(exc).__name__}: {exc}"
    return None


def result_text(result: Any, limit: int) -> str:
    """A CallToolResult as text for the model: text and embedded text resources verbatim, structured
    content as JSON when nothing else says it, other content summarised; head and tail kept within ``limit``."""
    parts = [_content_text(block) for block in (result.content or [])]
    text = "\n".join(p for p in parts if p)
    structured = getattr(result, "structured_content", None)
    if structured is not None and not any(getattr(b, "type", "") == "text" for b in (result.content or [])):
        text = (text + "\n" if text else "") + json.dumps(structured, ensure_ascii=False, indent=1)
    if not text:
        text = "(the tool returned no content)"
    return cap_text(text, limit)


def cap_text(text: str, limit: int) -> str:
    cap = OutputCap(limit)
    cap.feed(text.encode("utf-8"))
    return cap.text()


def _content_text(block: Any) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return block.text
    if kind in ("image", "audio"):
        size = len(getattr(block, "data", "") or "") * 3 // 4
        return f"[{kind} content: {getattr(block, 'mime_type', '?')}, about {size} bytes, not shown]"
    if kind == "resource_link":
        return f"[resource link: {block.uri}" + (f" ({block.name})" if getattr(block, "name", None) else "") + "]"
    if kind == "resource":
        resource = block.resource
        if getattr(resource, "text", None) is not None:
            return f"[resource {resource.uri}]\n{resource.text}"
        size = len(getattr(resource, "blob", "") or "") * 3 // 4
        return f"[resource {resource.uri}: {getattr(resource, 'mime_type', None) or 'binary'}, about {size} bytes, not shown]"
    return f"[{kind or type(block).__name__} content, not shown]"

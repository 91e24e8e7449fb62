"""Tool calls → the Qwen3-Coder XML text the parser reads (for prompts and for training data)."""

from __future__ import annotations

import json
from typing import Any

from clovercode.toolcalls.schemas import ToolSpec


def render_call(name: str, arguments: dict[str, Any], spec: ToolSpec | None = None) -> str:
    """The call in the XML form, parameters in schema order when ``spec`` is given."""
    order = list((spec.schema.get("properties") if spec else None) or arguments)
    keys = [k for k in order if k in arguments] + [k for k in arguments if k not in order]
    parts = ["<tool_call>", f"<function={name}>"]
    for key in keys:
        value = arguments[key]
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (dict, list)):
            text = json.dumps(value, ensure_ascii=False)
        else:
            text = str(value)
        parts += [f"<parameter={key}>", text, "</parameter>"]
    parts += ["</function>", "</tool_call>"]
    return "\n".join(parts)

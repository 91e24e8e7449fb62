"""The prompt text for a conversation with tools.

When the tokenizer's chat template handles tools (it reads the ``tools`` variable, as the Qwen3 /
Qwen3.6 templates Clover inherits do) it renders everything. Otherwise the tool section and the
format instructions are written here, Qwen3-Coder style, from the schemas in ``tools/``, and
assistant tool calls and tool results become plain text the model's own template can carry.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from clovercode.ground.messages import Message
from clovercode.toolcalls.render import render_call
from clovercode.toolcalls.schemas import ToolSpec

CHATML = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

FORMAT_INSTRUCTIONS = """\
To call a function, reply with a block in exactly this format, and nothing after it:

<tool_call>
<function=FUNCTION_NAME>
<parameter=PARAMETER_NAME>
value
</parameter>
<parameter=OTHER_PARAMETER>
a value may span
several lines
</parameter>
</function>
</tool_call>

Rules:
- The <function=...> block sits inside <tool_call></tool_call>.
- Give every required parameter; leave out optional ones you do not need.
- You may explain briefly in plain text before the call, never after it."""


def template_source(tokenizer: Any, with_tools: bool) -> str | None:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        return template.get("tool_use" if with_tools and "tool_use" in template else "default")
    return template


def supports_tools(tokenizer: Any) -> bool:
    source = template_source(tokenizer, True)
    return bool(source) and "tools" in source


def tool_section(tools: Sequence[ToolSpec]) -> str:
    """The tools, described Qwen3-Coder style, followed by the call format."""
    lines = ["# Tools", "", "You can call these functions:", "", "<tools>"]
    for spec in tools:
        lines += ["<function>", f"<name>{spec.name}</name>", f"<description>{spec.description}</description>", "<parameters>"]
        for key, sub in spec.schema.get("properties", {}).items():
            kind = sub.get("type", "string")
            lines += ["<parameter>", f"<name>{key}</name>",
                      f"<type>{' | '.join(kind) if isinstance(kind, list) else kind}</type>"]
            if sub.get("description"):
                lines.append(f"<description>{sub['description']}</description>")
            bounds = {k: sub[k] for k in ("enum", "minimum", "maximum", "exclusiveMinimum", "minLength", "maxLength")
                      if k in sub}
            if bounds:
                lines.append(f"<constraints>{json.dumps(bounds)}</constraints>")
            lines.append("</parameter>")
        lines += [f"<required>{json.dumps(spec.schema.get('required', []))}</required>", "</parameters>", "</function>"]
    lines += ["</tools>", "", FORMAT_INSTRUCTIONS]
    return "\n".join(lines)


def call_format(tokenizer: Any, with_tools: bool = True) -> str:
    """How this model writes a tool call: "xml" (Qwen3-Coder, also what clovercode's own tool section
    asks for) or "hermes" (JSON in <tool_call>, as Qwen2.5 / Qwen3 templates render past calls)."""
    if not (with_tools and supports_tools(tokenizer)):
        return "xml"
    source = template_source(tokenizer, True) or ""
    if "<function=" in source:
        return "xml"
    return "hermes" if "<tool_call>" in source else "xml"


def render_prompt(tokenizer: Any, messages: Sequence[Message], tools: Sequence[ToolSpec], thinking: bool) -> str:
    """The full prompt text, ending where the assistant's reply begins. The template comes with the
    model files, so it runs with limits (engine/template.py), not through ``apply_chat_template``."""
    from clovercode.engine.template import chat_variables, render  # jinja2 comes with the engine extra

    if tools and supports_tools(tokenizer):
        return render(template_source(tokenizer, True) or "", chat_variables(
            tokenizer, [m.to_template() for m in messages], [s.openai_tool() for s in tools], enable_thinking=thinking))
    plain = plain_messages(messages, tools, thinking)
    template = template_source(tokenizer, False) or CHATML
    return render(template, chat_variables(tokenizer, plain, None, enable_thinking=thinking))


def plain_messages(messages: Sequence[Message], tools: Sequence[ToolSpec], thinking: bool) -> list[dict[str, str]]:
    """Messages with roles system/user/assistant only: calls and results written out as text."""
    extra = []
    if tools:
        extra.append(tool_section(tools))
    if thinking:
        extra.append("Think step by step inside <think>...</think> before you answer or call a function.")
    out: list[dict[str, str]] = []
    for message in messages:
        if message.role == "system":
            out.append({"role": "system", "content": "\n\n".join([message.content, *extra]).strip()})
            extra = []
        elif message.role == "assistant":
            parts = [f"<think>\n{message.reasoning}\n</think>"] if message.reasoning else []
            parts += [message.content] if message.content else []
            parts += [render_call(c.name, c.arguments) for c in message.tool_calls]
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif message.role == "tool":
            body = f"<tool_response>\n{message.content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1]["content"] += "\n" + body  # consecutive results share one turn, as in Qwen templates
            else:
                out.append({"role": "user", "content": body})
        else:
            out.append({"role": "user", "content": message.content})
    if extra:
        out.insert(0, {"role": "system", "content": "\n\n".join(extra)})
    return out

"""Prompt rendering with tools: the tokenizer's own template when it handles tools, else ours."""

import pytest

from clovercode.ground.messages import CallRecord, Message
from clovercode.engine.chat import CHATML, plain_messages, render_prompt, supports_tools, tool_section
from clovercode.engine.sources import tiny_model_dir
from clovercode.toolcalls.parser import parse_turn
from clovercode.toolcalls.schemas import load_tool_specs

TOOLS_TEMPLATE = (
    "{%- if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>\n{% endif %}"
    "{%- for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{%- if m.tool_calls %}{% for c in m.tool_calls %}[call {{ c.function.name }} {{ c.function.arguments | tojson }}]"
    "{% endfor %}{% endif %}</{{ m.role }}>\n{% endfor %}"
    "{%- if add_generation_prompt %}<assistant>{% if not enable_thinking %}<think></think>{% endif %}{% endif %}")


@pytest.fixture
def tokenizer():
    """A tokenizer whose chat template knows nothing of tools (plain ChatML)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir())
    tok.chat_template = CHATML
    return tok


def test_clover_tiny_takes_tools_but_keeps_them_out_of_its_prompt():
    """The tiny model was trained on bare requests: its own template accepts `tools` and drops them."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir())
    assert supports_tools(tok)
    request = [Message("user", "Show lines 3-9 of a.py.")]
    assert render_prompt(tok, request, load_tool_specs(), thinking=False) == render_prompt(tok, request, (), thinking=False) \
        == "<|im_start|>user\nShow lines 3-9 of a.py.<|im_end|>\n<|im_start|>assistant\n"


CONVERSATION = [
    Message("system", "You are a test."),
    Message("user", "Fix it."),
    Message("assistant", "Looking.", tool_calls=(CallRecord("c1", "view_file", {"path": "a.py", "start_line": 3}),)),
    Message("tool", "1: x = 1", tool_call_id="c1", name="view_file"),
    Message("user", "Tests fail."),
]


def test_fallback_writes_the_tool_section_and_format(tokenizer):
    specs = load_tool_specs()
    assert not supports_tools(tokenizer)
    text = render_prompt(tokenizer, CONVERSATION, specs, thinking=False)
    assert text.startswith("<|im_start|>system\nYou are a test.\n\n# Tools")
    for spec in specs:
        assert f"<name>{spec.name}</name>" in text
    assert "<required>[\"path\"]</required>" in text
    assert "<function=FUNCTION_NAME>" in text and "</tool_call>" in text
    assert "<think>" not in text.split("# Tools")[0]
    assert text.endswith("<|im_start|>assistant\n")


def test_fallback_writes_calls_and_results_as_text_the_parser_reads(tokenizer):
    plain = plain_messages(CONVERSATION, (), thinking=False)
    assert [m["role"] for m in plain] == ["system", "user", "assistant", "user", "user"]
    call = parse_turn(plain[2]["content"]).calls[0]
    assert (call.name, call.arguments) == ("view_file", {"path": "a.py", "start_line": "3"})
    assert plain[3]["content"] == "<tool_response>\n1: x = 1\n</tool_response>"


def test_thinking_on_asks_for_think_tags(tokenizer):
    text = render_prompt(tokenizer, CONVERSATION, load_tool_specs(), thinking=True)
    assert "inside <think>...</think>" in text


def test_no_system_message_still_gets_the_tools(tokenizer):
    text = render_prompt(tokenizer, [Message("user", "hi")], load_tool_specs()[:1], thinking=False)
    assert text.startswith("<|im_start|>system\n# Tools")


def test_a_template_that_handles_tools_renders_everything(tokenizer):
    tokenizer.chat_template = TOOLS_TEMPLATE
    assert supports_tools(tokenizer)
    specs = load_tool_specs()
    text = render_prompt(tokenizer, CONVERSATION, specs, thinking=False)
    assert text.startswith("<tools>" + "".join(f"{s.name};" for s in specs) + "</tools>")
    assert '[call view_file {"path": "a.py", "start_line": 3}]' in text
    assert text.endswith("<assistant><think></think>")
    assert render_prompt(tokenizer, CONVERSATION, specs, thinking=True).endswith("<assistant>")
    assert "# Tools" not in text


def test_tool_section_lists_constraints():
    section = tool_section([s for s in load_tool_specs() if s.name == "view_file"])
    assert '<constraints>{"minimum": 1}</constraints>' in section

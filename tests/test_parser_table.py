"""The parser + validator on a table of real-model outputs, well-formed and drifting.

Each case gives the model text, the calls that must run (after type coercion), and — for every
malformed case — the exact feedback text the model receives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from clovercode.toolcalls.review import FORMAT_REMINDER, NO_CALL_MESSAGE, review_turn
from clovercode.toolcalls.schemas import load_tool_specs
from clovercode.toolcalls.validate import Validator


def xml(name: str, **params: object) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


VIEW_SHAPE = 'Expected arguments: {"path": string non-empty (required), "start_line": integer ≥1, "end_line": integer ≥1}'
EDIT_SHAPE = ('Expected arguments: {"path": string non-empty (required), "old_text": string non-empty (required), '
              '"new_text": string (required), "replace_all": boolean}')


@dataclass
class Case:
    id: str
    text: str
    calls: list[tuple[str, dict]] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    content: str | None = None
    reasoning: str | None = None


CASES = [
    # --- well-formed -------------------------------------------------------------------------
    Case("xml-basic", xml("view_file", path="src/app.py"), [("view_file", {"path": "src/app.py"})]),
    Case("xml-int-coerced", xml("view_file", path="a.py", start_line=10, end_line=20),
         [("view_file", {"path": "a.py", "start_line": 10, "end_line": 20})]),
    Case("xml-compact-one-line", "<tool_call><function=list_files><parameter=path>src</parameter></function></tool_call>",
         [("list_files", {"path": "src"})]),
    Case("xml-no-params", xml("list_files"), [("list_files", {})]),
    Case("xml-multiline-value-keeps-indentation",
         xml("edit_file", path="m.py", old_text="    return a\n    # end", new_text="        return b"),
         [("edit_file", {"path": "m.py", "old_text": "    return a\n    # end", "new_text": "        return b"})]),
    Case("xml-bool-coerced", xml("edit_file", path="m.py", old_text="x", new_text="y", replace_all="true"),
         [("edit_file", {"path": "m.py", "old_text": "x", "new_text": "y", "replace_all": True})]),
    Case("xml-bool-capitalised", xml("search_text", pattern="TODO", case_sensitive="False"),
         [("search_text", {"pattern": "TODO", "case_sensitive": False})]),
    Case("xml-number-coerced", xml("run_command", command="pytest -q", timeout="2.5"),
         [("run_command", {"command": "pytest -q", "timeout": 2.5})]),
    Case("xml-integer-written-as-float", xml("view_file", path="a.py", start_line="3.0"),
         [("view_file", {"path": "a.py", "start_line": 3})]),
    Case("xml-quoted-names", '<tool_call>\n<function="view_file">\n<parameter="path">\na.py\n</parameter>\n</function>\n</tool_call>',
         [("view_file", {"path": "a.py"})]),
    Case("text-before-call", "I'll read the module first.\n" + xml("view_file", path="a.py"),
         [("view_file", {"path": "a.py"})], content="I'll read the module first."),
    Case("several-calls", xml("view_file", path="a.py") + "\n" + xml("view_file", path="b.py"),
         [("view_file", {"path": "a.py"}), ("view_file", {"path": "b.py"})]),
    Case("think-then-call", "<think>\nThe bug is in a.py.\n</think>\n\n" + xml("view_file", path="a.py"),
         [("view_file", {"path": "a.py"})], reasoning="The bug is in a.py.", content=""),
    Case("think-prefilled-by-template", "The bug is in a.py.\n</think>\n" + xml("view_file", path="a.py"),
         [("view_file", {"path": "a.py"})], reasoning="The bug is in a.py."),
    Case("call-inside-think-is-ignored", "<think>maybe " + xml("view_file", path="x.py") + "</think>" + xml("list_files"),
         [("list_files", {})]),
    Case("unclosed-think-is-all-reasoning", "<think>I should look at " + xml("view_file", path="x.py"),
         [], feedback=[NO_CALL_MESSAGE]),
    Case("hermes-json", '<tool_call>\n{"name": "view_file", "arguments": {"path": "a.py", "start_line": 4}}\n</tool_call>',
         [("view_file", {"path": "a.py", "start_line": 4})]),
    Case("hermes-string-number-coerced", '<tool_call>{"name": "view_file", "arguments": {"path": "a.py", "end_line": "9"}}</tool_call>',
         [("view_file", {"path": "a.py", "end_line": 9})]),
    Case("hermes-double-encoded-arguments", '<tool_call>{"name": "list_files", "arguments": "{\\"path\\": \\"src\\"}"}</tool_call>',
         [("list_files", {"path": "src"})]),
    Case("hermes-parameters-key", '<tool_call>{"name": "list_files", "parameters": {"path": "src"}}</tool_call>',
         [("list_files", {"path": "src"})]),
    Case("hermes-in-code-fence", '<tool_call>\n```json\n{"name": "list_files", "arguments": {}}\n```\n</tool_call>',
         [("list_files", {})]),
    Case("hermes-trailing-comma-repaired", '<tool_call>{"name": "view_file", "arguments": {"path": "a.py",}}</tool_call>',
         [("view_file", {"path": "a.py"})]),
    Case("hermes-python-literal-repaired", "<tool_call>{'name': 'search_text', 'arguments': {'pattern': 'x', 'case_sensitive': True}}</tool_call>",
         [("search_text", {"pattern": "x", "case_sensitive": True})]),
    Case("openai-function-object", '<tool_call>{"function": {"name": "list_files", "arguments": {"path": "."}}}</tool_call>',
         [("list_files", {"path": "."})]),
    Case("mixed-formats-in-one-turn", xml("view_file", path="a.py") + '\n<tool_call>{"name": "list_files", "arguments": {}}</tool_call>',
         [("view_file", {"path": "a.py"}), ("list_files", {})]),
    # --- drifts that are repaired silently ------------------------------------------------------
    Case("missing-tool-call-close-at-end", "Let me look.\n<tool_call>\n<function=view_file>\n<parameter=path>\na.py\n</parameter>\n</function>\n",
         [("view_file", {"path": "a.py"})], content="Let me look."),
    Case("missing-function-and-tool-call-close", "<tool_call>\n<function=view_file>\n<parameter=path>\na.py\n</parameter>\n",
         [("view_file", {"path": "a.py"})]),
    Case("missing-parameter-close-before-next", "<tool_call>\n<function=view_file>\n<parameter=path>\na.py\n<parameter=end_line>\n9\n</parameter>\n</function>\n</tool_call>",
         [("view_file", {"path": "a.py", "end_line": 9})]),
    Case("missing-parameter-close-before-function-end", "<tool_call>\n<function=view_file>\n<parameter=path>\na.py\n</function>\n</tool_call>",
         [("view_file", {"path": "a.py"})]),
    Case("missing-every-close-tag", "<tool_call>\n<function=view_file>\n<parameter=path>\na.py",
         [("view_file", {"path": "a.py"})]),
    Case("missing-close-between-two-calls", "<tool_call>\n<function=view_file>\n<parameter=path>\na.py\n</parameter>\n</function>\n" + xml("list_files"),
         [("view_file", {"path": "a.py"}), ("list_files", {})]),
    Case("bare-function-without-wrapper", "<function=list_files>\n<parameter=path>\nsrc\n</parameter>\n</function>",
         [("list_files", {"path": "src"})]),
    Case("array-and-object-coercion-free-text-untouched", xml("write_file", path="data.json", content='{"a": [1, 2]}'),
         [("write_file", {"path": "data.json", "content": '{"a": [1, 2]}'})]),
    Case("bare-json-printed-as-text", 'I will list the files.\n```json\n{"name": "list_files", "arguments": {"path": "src"}}\n```',
         [("list_files", {"path": "src"})], content="I will list the files."),
    # --- malformed: the model is told exactly what was wrong ------------------------------------
    Case("no-call-at-all", "I think the bug is in a.py.", [], feedback=[NO_CALL_MESSAGE]),
    Case("bare-json-of-unknown-tool-is-not-a-call", '{"name": "open_file", "arguments": {}}', [], feedback=[NO_CALL_MESSAGE]),
    Case("empty-tool-call", "<tool_call></tool_call>", [], feedback=[
        "tool call #1 is empty: put `<function=NAME>` and its parameters between <tool_call> and </tool_call>.\n" + FORMAT_REMINDER]),
    Case("unreadable-body", "<tool_call>view a.py please</tool_call>", [], feedback=[
        "tool call #1 could not be read: expected `<function=NAME>` with `<parameter=KEY>VALUE</parameter>` elements, "
        "or a JSON object {\"name\": ..., \"arguments\": {...}}; got 'view a.py please'.\n" + FORMAT_REMINDER]),
    Case("broken-json", '<tool_call>{"name": "view_file", "arguments": {"path": "a.py"</tool_call>', [], feedback=[
        "tool call #1: invalid JSON at line 1 column 51: Expecting ',' delimiter. "
        "'{\"name\": \"view_file\", \"arguments\": {\"path\": \"a.py\"'\n" + FORMAT_REMINDER]),
    Case("json-without-name", '<tool_call>{"arguments": {"path": "a.py"}}</tool_call>', [], feedback=[
        'tool call #1: the JSON object has no "name" string naming the tool.\n' + FORMAT_REMINDER]),
    Case("json-arguments-not-object", '<tool_call>{"name": "view_file", "arguments": ["a.py"]}</tool_call>', [], feedback=[
        'tool call #1 (view_file): "arguments" must be a JSON object, got list.\n' + FORMAT_REMINDER]),
    Case("function-without-name", "<tool_call><function=><parameter=path>a</parameter></function></tool_call>", [], feedback=[
        "tool call #1: `<function=...>` has no tool name.\n" + FORMAT_REMINDER]),
    Case("duplicate-parameter", xml("view_file", path="a.py") .replace("</function>", "<parameter=path>\nb.py\n</parameter>\n</function>"), [], feedback=[
        "tool call #1 (view_file): parameter 'path' is given twice; give each parameter once.\n" + FORMAT_REMINDER]),
    Case("unknown-tool-with-suggestion", xml("viewfile", path="a.py"), [], feedback=[
        "Unknown tool `viewfile`. Did you mean `view_file`? Valid tools: apply_patch, edit_file, finish, list_files, run_command, "
        "search_text, view_file, write_file."]),
    Case("unknown-tool-no-suggestion", xml("deploy", target="prod"), [], feedback=[
        "Unknown tool `deploy`. Valid tools: apply_patch, edit_file, finish, list_files, run_command, search_text, view_file, write_file."]),
    Case("missing-required-parameter", xml("view_file", start_line=3), [], feedback=[
        "Tool call `view_file` was not run: its arguments do not match the schema.\n"
        "- at $: 'path' is a required property (constraint: required)\n" + VIEW_SHAPE + "\nFix the call and try again."]),
    Case("wrong-type-not-coercible", xml("view_file", path="a.py", start_line="ten"), [], feedback=[
        "Tool call `view_file` was not run: its arguments do not match the schema.\n"
        "- at $.start_line: value 'ten' violates `type: \"integer\"` ('ten' is not of type 'integer')\n" + VIEW_SHAPE
        + "\nFix the call and try again."]),
    Case("below-minimum", xml("view_file", path="a.py", start_line=0), [], feedback=[
        "Tool call `view_file` was not run: its arguments do not match the schema.\n"
        "- at $.start_line: value 0 violates `minimum: 1` (0 is less than the minimum of 1)\n" + VIEW_SHAPE
        + "\nFix the call and try again."]),
    Case("unexpected-parameter-with-suggestion", xml("edit_file", path="a.py", old_txt="x", new_text="y"), [], feedback=[
        "Tool call `edit_file` was not run: its arguments do not match the schema.\n"
        "- at $: 'old_text' is a required property (constraint: required)\n"
        "- at $: unexpected parameter 'old_txt' (did you mean 'old_text'?) (constraint: additionalProperties is false)\n"
        + EDIT_SHAPE + "\nFix the call and try again."]),
    Case("valid-and-invalid-in-one-turn", xml("view_file", path="a.py") + xml("view_file"), [("view_file", {"path": "a.py"})], feedback=[
        "Tool call `view_file` was not run: its arguments do not match the schema.\n"
        "- at $: 'path' is a required property (constraint: required)\n" + VIEW_SHAPE + "\nFix the call and try again."]),
]


@pytest.fixture(scope="module")
def validator() -> Validator:
    return Validator(load_tool_specs())


def test_table_is_large_enough():
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case, validator: Validator):
    review = review_turn(case.text, validator, step=1, require_call=True)
    assert [(c.name, c.arguments) for c in review.runnable] == case.calls
    assert review.feedback() == case.feedback
    assert review.has_format_error == bool(case.feedback)
    if case.content is not None:
        assert review.turn.content == case.content
    if case.reasoning is not None:
        assert review.turn.reasoning == case.reasoning


def test_interactive_plain_answer_is_not_an_error(validator: Validator):
    review = review_turn("The function returns None when the list is empty.", validator, step=1, require_call=False)
    assert review.checked == [] and review.feedback() == []


def test_call_ids_are_unique_per_step(validator: Validator):
    review = review_turn(xml("list_files") + xml("list_files"), validator, step=7, require_call=True)
    assert [c.id for c in review.checked] == ["call_7_1", "call_7_2"]

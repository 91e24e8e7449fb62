"""The parser + validator on a table of real-model outputs, well-formed and drifting.

Each case gives the model text, the calls that must run (after type coercion), and — for every
malformed case — the exact feedback text the model receives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from clovercode.toolcalls.parser import CUT_ADVICE
from clovercode.toolcalls.review import FORMAT_REMINDER, NO_CALL_MESSAGE, review_turn
from clovercode.toolcalls.schemas import load_tool_specs
from clovercode.toolcalls.validate import Validator


def xml(name: str, **params: object) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def cut(name: str | None, param: str | None = None, ordinal: int = 1) -> str:
    inside = f" (inside parameter '{param}')" if param else ""
    tool = f" ({name})" if name else ""
    return (f"tool call #{ordinal}{tool} was not run: your reply ended in the middle of it{inside}, before `</function>`. "
            + CUT_ADVICE + "\n" + FORMAT_REMINDER)


POM = ("<project>\n  <build>\n    <function>\n      <name>verify</name>\n    </function>\n"
       "    <parameter>\n      <key>x</key>\n    </parameter>\n  </build>\n</project>")
EXAMPLE_CALL = xml("view_file", path="a.py")
DOC = "# Calling tools\n\nA call looks like this:\n\n" + EXAMPLE_CALL + "\n\nOne call per block.\n"
THINKING_CODE = 'def strip(text):\n    return text.split("</think>")[-1]  # drop <think>...</think>\n'
PY_WITH_CALL = 'CALL = "<tool_call>\\n<function=x>\\n</function>\\n</tool_call>"\nprint(CALL)\n'

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
    # A reply that ends before `</function>` may have been cut after any parameter: never run it.
    Case("missing-function-and-tool-call-close", "<tool_call>\n<function=view_file>\n<parameter=path>\na.py\n</parameter>\n",
         [], feedback=[cut("view_file")]),
    Case("missing-parameter-close-before-next", "<tool_call>\n<function=view_file>\n<parameter=path>\na.py\n<parameter=end_line>\n9\n</parameter>\n</function>\n</tool_call>",
         [("view_file", {"path": "a.py", "end_line": 9})]),
    Case("missing-parameter-close-compact-form", "<tool_call><function=view_file><parameter=path>a.py<parameter=end_line>3"
         "</parameter></function></tool_call>", [("view_file", {"path": "a.py", "end_line": 3})]),
    Case("parameter-tag-inside-a-text-value", xml("write_file", path="f.md", content="# Format\nName it with <parameter=NAME> tags."),
         [("write_file", {"path": "f.md", "content": "# Format\nName it with <parameter=NAME> tags."})]),
    Case("missing-parameter-close-before-function-end", "<tool_call>\n<function=view_file>\n<parameter=path>\na.py\n</function>\n</tool_call>",
         [("view_file", {"path": "a.py"})]),
    Case("missing-every-close-tag", "<tool_call>\n<function=view_file>\n<parameter=path>\na.py",
         [], feedback=[cut("view_file", "path")]),
    Case("missing-close-between-two-calls", "<tool_call>\n<function=view_file>\n<parameter=path>\na.py\n</parameter>\n</function>\n" + xml("list_files"),
         [("view_file", {"path": "a.py"}), ("list_files", {})]),
    Case("bare-function-without-wrapper", "<function=list_files>\n<parameter=path>\nsrc\n</parameter>\n</function>",
         [("list_files", {"path": "src"})]),
    Case("array-and-object-coercion-free-text-untouched", xml("write_file", path="data.json", content='{"a": [1, 2]}'),
         [("write_file", {"path": "data.json", "content": '{"a": [1, 2]}'})]),
    Case("bare-json-printed-as-text", 'I will list the files.\n```json\n{"name": "list_files", "arguments": {"path": "src"}}\n```',
         [("list_files", {"path": "src"})], content="I will list the files."),
    # --- values keep their text: closing tags close a value only where the structure allows ----
    Case("value-holding-function-and-parameter-closes", xml("write_file", path="pom.xml", content=POM),
         [("write_file", {"path": "pom.xml", "content": POM})]),
    Case("value-holding-an-example-call-is-data", xml("write_file", path="docs/tools.md", content=DOC),
         [("write_file", {"path": "docs/tools.md", "content": DOC})]),
    Case("example-call-then-the-real-one", xml("write_file", path="docs/tools.md", content=DOC) + "\n" + xml("list_files"),
         [("write_file", {"path": "docs/tools.md", "content": DOC}), ("list_files", {})]),
    Case("value-keeps-think-tags", "<think>\nWrite it.\n</think>\n" + xml("write_file", path="t.py", content=THINKING_CODE),
         [("write_file", {"path": "t.py", "content": THINKING_CODE})], reasoning="Write it."),
    Case("value-ending-in-closing-tags-of-a-snippet",
         xml("write_file", path="end.md", content="Close with:\n</parameter>\n</function>\n</tool_call>\nand stop."),
         [("write_file", {"path": "end.md", "content": "Close with:\n</parameter>\n</function>\n</tool_call>\nand stop."})]),
    Case("think-block-after-a-call-is-reasoning", xml("list_files") + "\n<think>then read</think>\nok",
         [("list_files", {})], reasoning="then read", content="ok"),
    Case("call-drafted-in-prefilled-reasoning-is-ignored", "I could " + xml("view_file", path="x.py") + " but no.\n</think>\n"
         + xml("list_files"), [("list_files", {})], reasoning="I could " + xml("view_file", path="x.py") + " but no."),
    # the cost of that rule: an unfinished call drafted in template-opened reasoning swallows the reply
    Case("unfinished-call-drafted-in-prefilled-reasoning", "Maybe <tool_call>\n<function=view_file>\n<parameter=path>\nx.py"
         "\nno, list first.\n</think>\n" + xml("list_files"), [], feedback=[cut("view_file", "path")]),
    Case("cut-value-holding-think-and-an-example-call", "<tool_call>\n<function=write_file>\n<parameter=path>\nREADME.md\n"
         "</parameter>\n<parameter=content>\nReason in <think>…</think>, then call:\n</think>\n"
         + xml("run_command", command="rm -rf build"), [], feedback=[cut("write_file", "content")]),
    Case("hermes-value-holding-tool-call-close",
         '<tool_call>{"name": "write_file", "arguments": {"path": "a.md", "content": "ends with </tool_call> ok"}}</tool_call>',
         [("write_file", {"path": "a.md", "content": "ends with </tool_call> ok"})]),
    # --- cut replies (token limit, stream cut): the call never runs, the model is told why -------
    Case("cut-inside-a-written-file", "<tool_call>\n<function=write_file>\n<parameter=path>\nbig.py\n</parameter>\n"
         "<parameter=content>\nimport os\n\ndef main():\n    os.", [], feedback=[cut("write_file", "content")]),
    Case("cut-after-the-last-parameter-close", "<tool_call>\n<function=write_file>\n<parameter=path>\nbig.py\n</parameter>\n"
         "<parameter=content>\nx = 1\n</parameter>", [], feedback=[cut("write_file")]),
    # the engine stops at the first </tool_call>: one inside a value leaves the call open, and it must not run
    Case("cut-at-the-example-calls-close", "<tool_call>\n<function=write_file>\n<parameter=path>\ndocs/tools.md\n</parameter>\n"
         "<parameter=content>\nA call looks like this:\n" + EXAMPLE_CALL, [], feedback=[cut("write_file", "content")]),
    Case("cut-at-a-tool-call-close-in-a-string", xml("write_file", path="c.py", content=PY_WITH_CALL).split("</tool_call>")[0]
         + "</tool_call>", [], feedback=[cut("write_file", "content")]),
    Case("cut-bare-function", "<function=write_file>\n<parameter=path>\na.py\n</parameter>\n<parameter=content>\nx",
         [], feedback=[cut("write_file", "content")]),
    Case("cut-after-a-complete-call", xml("list_files") + "\n<tool_call>\n<function=write_file>\n<parameter=path>\na",
         [("list_files", {})], feedback=[cut("write_file", "path", 2)]),
    Case("cut-inside-hermes-json", '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py", "content": "import',
         [], feedback=["tool call #1 was not run: your reply ended in the middle of it, before its JSON object and "
                       "`</tool_call>` were complete. " + CUT_ADVICE + "\n" + FORMAT_REMINDER]),
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
        "search_text, update_plan, view_file, write_file."]),
    Case("unknown-tool-no-suggestion", xml("deploy", target="prod"), [], feedback=[
        "Unknown tool `deploy`. Valid tools: apply_patch, edit_file, finish, list_files, run_command, search_text, update_plan, view_file, write_file."]),
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


def tagged_sources() -> list:
    """This project's own files that hold tool-call markup (tests, docs, the parser): hard values."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    files = [*root.glob("tests/*.py"), *root.glob("docs/*.md"), *root.glob("clovercode/**/*.py"),
             *root.glob("tests/**/*.jsonl"), *root.glob("examples/*.jsonl")]  # replays: calls on one line
    return sorted(p for p in files if "</" in p.read_text(encoding="utf-8"))


def test_every_file_holding_markup_is_written_whole():
    from clovercode.toolcalls.parser import parse_turn
    from clovercode.toolcalls.render import render_call

    sources = tagged_sources()
    assert len(sources) > 10
    for path in sources:
        content = path.read_text(encoding="utf-8")
        text = render_call("write_file", {"path": path.name, "content": content})
        for variant in (text, f"Writing it.\n{text}\nDone.", text[:-len("</tool_call>")]):
            turn = parse_turn(variant)
            assert turn.errors == [] and [c.arguments["content"] for c in turn.calls] == [content], path


def test_an_engine_stop_inside_a_value_never_runs_a_shortened_write():
    """The engine stops at the first </tool_call>, even one inside a value: that call must not run."""
    from clovercode.toolcalls.parser import parse_turn
    from clovercode.toolcalls.render import render_call

    holding = [p for p in tagged_sources() if "</tool_call>" in p.read_text(encoding="utf-8")]
    assert len(holding) > 5
    for path in holding:
        text = render_call("write_file", {"path": path.name, "content": path.read_text(encoding="utf-8")})
        stopped = text[:text.index("</tool_call>") + len("</tool_call>")]
        turn = parse_turn(stopped)
        assert turn.calls == [] and "was not run: your reply ended in the middle of it" in turn.errors[0], path


def test_a_value_full_of_tags_neither_exhausts_the_stack_nor_runs():
    """Thousands of closing-tag candidates: the scanner has no recursion to exhaust, and a reading
    in which a parameter repeats is refused (nothing runs)."""
    from clovercode.toolcalls.parser import parse_turn
    from clovercode.toolcalls.render import render_call

    text = render_call("write_file", {"path": "x", "content": "<parameter=a>\n1\n</parameter>\n" * 5000}) + "\n</tool_call>"
    turn = parse_turn(text)
    assert turn.calls == [] and "parameter 'a' is given twice" in turn.errors[0]

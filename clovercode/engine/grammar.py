"""Grammars for constrained tool calls, as llguidance Lark text, from plain tool specs.

The engine knows no agent: a tool here is a plain mapping ``{"name": ..., "parameters": <JSON
Schema of the arguments>}`` (the ``function`` part of an OpenAI tool definition). What comes out is
grammar *text*; :mod:`clovercode.engine.constraint` compiles it against a tokenizer.

The shape of a turn (``tool_choice`` with OpenAI's meanings):

* ``auto``     prose, then any number of calls, then optional prose without a call in it; free text
               until a call opens, every call once opened is valid;
* ``required`` prose, then at least one call (the constraint caps the prose: past a budget of
               tokens a model that rambles is steered into ``CALL_OPENING``);
* a tool name  as ``required``, with only that tool;
* ``none``     prose that never opens a call.

Prose (reasoning in ``<think>`` included) may not contain a call opener (``<tool_call>`` or
``<function=``): the first opener starts a call, and everything after it follows the call format.

Calls are in the model's own format:

* ``xml`` (Qwen3-Coder, what Clover and clovercode's own tool section use)::

      <tool_call>
      <function=NAME>
      <parameter=KEY>
      VALUE
      </parameter>
      </function>
      </tool_call>

  Parameters come in the schema's order; optional ones may be left out. Each value follows its
  property schema: a string is free text (that cannot close the parameter early), an integer or a
  number a JSON number within its bounds, a boolean ``true``/``false``, an enum one of its values,
  an object or array JSON valid against the schema.
* ``hermes``: ``<tool_call>\\n{"name": NAME, "arguments": {...}}\\n</tool_call>``, the arguments JSON
  valid against the tool's schema.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

CHOICES = ("auto", "required", "none")
FORMATS = ("xml", "hermes")
# Text that would start (or, inside a value, end) a call in the parser's eyes: prose and string
# values may not contain it.
OPENERS = ("<tool_call>", "<function=")
# A string value may hold none of these, not even a closer's start: a small model that writes
# "</parameter_city>" is held to the one closer there is instead of writing on to its token limit.
VALUE_ENDS = ("</parameter", "<parameter=", "</function", "</tool_call")
# Tags a tokenizer may hold as single special tokens (llguidance matches those by id, not by text).
THINK_TAGS = ("<think>", "</think>")
TAGS = ("<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>", "<think>", "</think>")
JSON_SPACE = r"[ ]?"
ANY_ORDER_MAX = 6  # XML parameters in any order up to this many per tool (2**n grammar rules)
CALL_OPENING = "\n<tool_call>\n"  # what a turn that must call is steered into when its prose runs long
REASONING_END = "\n</think>"  # said first when the prose budget runs out inside reasoning
# What closes an open XML call when the token limit nears (Steering.close_at), tried in turn: inside
# a string value, after a parameter, after the function.
CALL_CLOSINGS = ("\n</parameter>\n</function>\n</tool_call>", "</function>\n</tool_call>", "</tool_call>")


class GrammarError(ValueError):
    """The tools or the choice cannot be turned into a grammar (unknown tool, bad name)."""


class _Writer:
    """Grammar lines, with each tag written as text or as its special token."""

    def __init__(self, special: Mapping[str, int]):
        self.special = {t: int(i) for t, i in special.items() if t in TAGS}
        self.lines: list[str] = []

    def tag(self, tag: str, after: str = "") -> str:
        """A tag followed by literal text, as grammar items."""
        if tag in self.special:
            return f"<[{self.special[tag]}]>" + (f" {_literal(after)}" if after else "")
        return _literal(tag + after)

    def text_then(self, name: str, body: str, tag: str, after: str = "", empty: bool = True) -> str:
        """Rule ``name``: free text (the regex ``body``, which holds no tag) then ``tag`` + ``after``.
        A text tag closes the terminal itself, so the text ends exactly at the first tag; a special
        tag cannot be part of text, so the text simply ends where it comes."""
        term = name.upper()
        if tag in self.special:
            self.lines.append(f"{term}: {body}")
            self.lines.append(f"{name}: {term}{'?' if empty else ''} {self.tag(tag, after)}")
        else:
            self.lines.append(f"{term}: ({body}) {_literal(tag + after)}")
            self.lines.append(f"{name}: {term}" + (f" | {_literal(tag + after)}" if empty else ""))
        return name


def tool_call_grammar(tools: Sequence[Mapping[str, Any]], choice: str = "auto", fmt: str = "xml",
                      special: Mapping[str, int] | None = None) -> str:
    """The Lark grammar of one assistant turn under ``choice`` (auto / required / none / a tool name).
    ``special`` maps the tags the tokenizer holds as special tokens to their ids."""
    if fmt not in FORMATS:
        raise GrammarError(f"unknown tool-call format {fmt!r}; use one of {', '.join(FORMATS)}")
    names = [str(t.get("name", "")) for t in tools]
    for name in names:
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
            raise GrammarError(f"tool name {name!r} cannot be used in a call (letters, digits, _ . - only)")
    if choice not in CHOICES:
        if choice not in names:
            raise GrammarError(f"tool_choice names {choice!r}, which is not among the tools offered "
                               f"({', '.join(names) or 'none'})")
        tools = [t for t in tools if t.get("name") == choice]
    w = _Writer(special or {})
    # Prose: text without a call opener or a reasoning tag, and whole reasoning blocks (<think> …
    # </think>) after an optional first </think> (reasoning the template opened). Unbalanced tags
    # would hide the call from the parser: a call after an unclosed <think> is reasoning, and a
    # stray </think> makes everything before it reasoning, calls included. Two text lexemes never
    # touch: the lexer would end one where the next byte completes an opener and start the next
    # there, so the opener would slip through.
    free = _negated("/(?s:.+)/", OPENERS + THINK_TAGS)
    w.lines.append(f"TEXT: {free}")
    for name, tag in (("lead", "</think>"), ("think_open", "<think>"), ("think_close", "</think>")):
        w.text_then(name, free, tag)
    w.lines += ["segs: (think_open think_close)*", "prose: segs TEXT?"]
    if choice == "none" or not tools:
        return "\n".join(["%llguidance {}", "start: lead? prose", *w.lines]) + "\n"
    w.text_then("opener", free, "<tool_call>", "\n")
    if choice == "auto":
        w.lines.insert(0, "start: lead? (segs opener body)* prose")
    else:
        w.lines.insert(0, "start: lead? segs opener body (WS? more body)* WS?")
        w.lines += ["more: " + w.tag("<tool_call>", "\n"), "WS: /[ \\t\\r\\n]+/"]
    w.lines.append("fn: " + " | ".join(f"fn_{i}" for i in range(len(tools))))
    if fmt == "xml":
        w.lines.append("body: fn " + w.tag("</tool_call>"))
        for i, tool in enumerate(tools):
            w.lines.append(f"fn_{i}: {w.tag('<function=', tool['name'] + '>' + chr(10))} args_{i} "
                           f"{w.tag('</function>', chr(10))}")
            _xml_arguments(w, f"args_{i}", tool.get("parameters") or {})
    else:
        w.lines.append('body: fn "\\n" ' + w.tag("</tool_call>"))
        for i, tool in enumerate(tools):
            w.lines.append(f"fn_{i}: %json {json.dumps(_hermes_schema(tool), separators=(',', ':'))}")
    return "\n".join(["%llguidance {}", *w.lines]) + "\n"


def _xml_arguments(w: _Writer, rule: str, schema: Mapping[str, Any]) -> None:
    """The parameters of one function. Up to ANY_ORDER_MAX of them may come in any order (each at most
    once, the required ones all present): one rule per set of parameters still to come, 2**n rules.
    Beyond that, schema order (the rules would grow too fast)."""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    if not isinstance(props, Mapping):
        props = {}
    params = []
    for j, (key, sub) in enumerate(props.items()):
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", str(key)):
            raise GrammarError(f"parameter name {key!r} cannot be used in a call")
        name = f"{rule}_{j}"
        w.lines.append(f"{name}: {w.tag('<parameter=', str(key) + '>' + chr(10))} {name}_v")
        _value_rules(w, f"{name}_v", sub if isinstance(sub, Mapping) else {})
        params.append((name, key in required))
    if not params:
        w.lines.append(f'{rule}: ""')
    elif len(params) > ANY_ORDER_MAX:
        w.lines.append(f"{rule}: " + " ".join(name if needed else f"{name}?" for name, needed in params))
    else:
        for left in range(2 ** len(params) - 1, 0, -1):  # bit j set: parameter j may still come
            alternatives = [f"{name} {rule}_left{left & ~(1 << j)}" if left & ~(1 << j) else name
                            for j, (name, _) in enumerate(params) if left >> j & 1]
            if not any(needed for j, (_, needed) in enumerate(params) if left >> j & 1):
                alternatives.append('""')
            w.lines.append(f"{rule}_left{left}: " + " | ".join(alternatives))
        w.lines.append(f"{rule}: {rule}_left{2 ** len(params) - 1}")


def _value_rules(w: _Writer, rule: str, schema: Mapping[str, Any]) -> None:
    """One XML parameter value and its closing tag."""
    close = w.tag("</parameter>", "\n")
    if "enum" in schema or "const" in schema:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        w.lines.append(f"{rule}: (" + " | ".join(_literal(_xml_text(v) + "\n") for v in values) + f") {close}")
        return
    kinds = schema.get("type")
    kinds = list(kinds) if isinstance(kinds, list) else [kinds] if kinds else []
    alternatives = []
    if kinds and "string" not in kinds and not any(k in schema for k in ("anyOf", "oneOf", "allOf", "$ref")):
        for kind in kinds:
            if kind == "boolean":
                alternatives += ['"true"', '"false"']
            elif kind == "null":
                alternatives.append('"null"')
            elif kind in ("integer", "number", "object", "array"):
                sub = {k: v for k, v in schema.items() if k not in ("description", "title", "default", "examples")}
                sub["type"] = kind
                alternatives.append("%json " + json.dumps(sub, separators=(",", ":")))
    if alternatives:
        w.lines.append(f"{rule}: (" + " | ".join(alternatives) + f") " + _literal("\n") + f" {close}")
        return
    # Free text: strings, and the fallback for schemas a value grammar cannot express (the validator
    # still checks those). The text may not hold a tag that would end the value in the parser, and
    # a string keeps to its schema's minLength, maxLength and (anchored) pattern.
    # The line break before the closer is optional (the parser takes "VALUE</parameter>" alike), so a
    # model that closes on the value's own line is not pushed on.
    w.text_then(rule, f"({string_regex(schema)}) " + "/(\\n)?/", "</parameter>", "\n", empty=False)


def string_regex(schema: Mapping[str, Any]) -> str:
    """An XML string value as an llguidance regex expression: any text within the schema's length
    bounds and pattern (when :func:`pattern_regex` can express it) that holds no value-ending tag."""
    string = "string" in (schema.get("type") if isinstance(schema.get("type"), list) else [schema.get("type")])
    least = int(schema.get("minLength", 0) or 0) if string else 0
    most = schema.get("maxLength") if string else None
    length = f"{{{least},{int(most)}}}" if isinstance(most, int) else f"{{{least},}}" if least else "*"
    parts = [f"/(?s:.{length})/"]
    pattern = pattern_regex(schema.get("pattern")) if string else None
    if pattern is not None:
        parts.append(f"/{pattern}/")
    return " & ".join(parts) + f" & ~/(?s:.*)({_alternation(VALUE_ENDS)})(?s:.*)/"


# A JSON Schema pattern the grammar enforces: anchored at both ends, made of literals, classes,
# groups, alternatives and counted repeats only, so that Python's re (the validator), ECMA-262 and
# llguidance's regex (Rust syntax) read it alike (\s and \w differ between them at the edges of
# Unicode; flags, lookarounds and back-references are not shared). Anything else is left to the
# validator, as are anyOf and friends.
_PATTERN_UNSAFE = re.compile(r"\\[^nrtxdD.\\^$|?*+()\[\]{}/-]|\\x(?![0-9A-Fa-f]{2})|\(\?")


def pattern_regex(pattern: Any) -> str | None:
    """``pattern`` as the body of an llguidance regex matching exactly the anchored texts, or None."""
    if not isinstance(pattern, str) or not (pattern.startswith("^") and pattern.endswith("$")):
        return None
    inner = pattern[1:-1]
    if inner.endswith("\\") or _PATTERN_UNSAFE.search(inner) or re.search(r"(?<!\\)[\^$](?![^\[]*\])", inner):
        return None
    try:
        re.compile(pattern)
    except re.error:
        return None
    return inner.replace("/", "\\/")


def _hermes_schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    arguments = dict(tool.get("parameters") or {"type": "object"})
    for key in ("$schema", "$id", "title", "description"):
        arguments.pop(key, None)
    return {"type": "object", "properties": {"name": {"const": tool["name"]}, "arguments": arguments},
            "required": ["name", "arguments"], "additionalProperties": False}


def json_grammar(schema: Mapping[str, Any], special: Mapping[str, int] | None = None, reasoning: bool = True) -> str:
    """A reply that is one JSON value valid against ``schema``, after optional reasoning (when
    ``reasoning`` and the tokenizer has special think tags)."""
    w = _Writer((special or {}) if reasoning else {})
    # At most one space between JSON tokens: llguidance's default allows any run of whitespace, and a
    # small model fills its whole budget with line breaks (so pretty-printed JSON comes out on one line).
    body = {"x-guidance": {"whitespace_pattern": JSON_SPACE}, **dict(schema)}
    w.lines += ["start: (think WS?)? value", "WS: /[ \\t\\r\\n]+/",
                f"value: %json {json.dumps(body, separators=(',', ':'))}"]
    if "<think>" in w.special and "</think>" in w.special:
        # Reasoning opens with its tag here: free text where the JSON may start would make llguidance
        # pick one lexer for both, and the JSON would be lost.
        w.lines += [f"think: {w.tag('<think>')} REASON? {w.tag('</think>')}",
                    f"REASON: {_negated('/(?s:.+)/', ('</think>',))}"]
    else:  # reasoning in text would share the start with the JSON: the same conflict, no way round it
        w.lines[0] = "start: value"
    return "\n".join(["%llguidance {}", *w.lines]) + "\n"


def _xml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _alternation(strings: Sequence[str]) -> str:
    return "|".join(_regex_escape(s) for s in strings)


def _regex_escape(text: str) -> str:
    return re.sub(r"([\\.^$|?*+()\[\]{}/])", r"\\\1", text)


def _negated(regex: str, forbidden: Sequence[str]) -> str:
    """``regex`` restricted to texts that contain none of ``forbidden`` (llguidance's & and ~)."""
    return f"{regex} & ~/(?s:.*)({_alternation(forbidden)})(?s:.*)/"




def shortest_call(tool: Mapping[str, Any]) -> str:
    """The shortest XML call of ``tool`` (required parameters only, one-character values): a turn
    that must call needs at least its tokens."""
    schema = tool.get("parameters") or {}
    props = schema.get("properties") or {}
    params = "".join(f"<parameter={key}>\n{_shortest_value(props.get(key) or {})}\n</parameter>\n"
                     for key in (schema.get("required") or []))
    return f"<tool_call>\n<function={tool['name']}>\n{params}</function>\n</tool_call>"


def _shortest_value(schema: Any) -> str:
    kinds = schema.get("type") if isinstance(schema, Mapping) else None
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if isinstance(schema, Mapping) and ("enum" in schema or "const" in schema):
        values = schema.get("enum") or [schema.get("const")]
        return min((_xml_text(v) for v in values), key=len)
    return {"object": "{}", "array": "[]", "boolean": "true"}.get(next((k for k in kinds if k), "string"), "x")

"""Model text → reasoning, prose and tool calls.

Accepts the Qwen3-Coder XML form (what Clover emits) and the Hermes JSON form, and the drifts real
models produce: a missing ``</tool_call>`` at the end of output, a missing ``</parameter>`` or
``</function>``, calls without the ``<tool_call>`` wrapper, JSON wrapped in code fences, double-encoded
JSON arguments, and — only as a fallback when no tagged call exists — bare JSON calls printed as text.
Values stay strings here (XML) or JSON values (Hermes); types are fixed by :mod:`coerce`.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

_FUNCTION_RE = re.compile(r"<function\s*=\s*[\"']?([^>\"'\s]*)[\"']?\s*>")
_PARAM_RE = re.compile(r"<parameter\s*=\s*[\"']?([^>\"'\s]*)[\"']?\s*>")
_PARAM_END_RE = re.compile(r"</parameter>|<parameter\s*=|</function>|</tool_call>")
_FENCE_RE = re.compile(r"^\s*```[a-zA-Z]*\s*\n?(.*?)\n?```\s*$", re.S)
_BARE_JSON_RE = re.compile(r"\{\s*\"name\"\s*:")
_TRAILING_COMMA_RE = re.compile(r",\s*([}\]])")


@dataclass
class ParsedCall:
    name: str
    arguments: dict[str, Any]
    raw: str
    format: str  # "xml" or "json"


@dataclass
class ParsedTurn:
    content: str = ""
    reasoning: str = ""
    calls: list[ParsedCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def split_reasoning(text: str) -> tuple[str, str]:
    """Return (reasoning, rest). Handles a missing ``<think>`` (templates often pre-fill it) and a
    ``<think>`` never closed (output cut off while reasoning)."""
    close = text.find(THINK_CLOSE)
    open_ = text.find(THINK_OPEN)
    if close != -1 and (open_ == -1 or open_ > close):
        return text[:close].strip(), text[close + len(THINK_CLOSE):]
    if open_ == -1:
        return "", text
    if close == -1:
        return text[open_ + len(THINK_OPEN):].strip(), text[:open_]
    reasoning = text[open_ + len(THINK_OPEN):close].strip()
    return reasoning, text[:open_] + text[close + len(THINK_CLOSE):]


def parse_turn(text: str, known_tools: Iterable[str] = ()) -> ParsedTurn:
    reasoning, rest = split_reasoning(text)
    turn = ParsedTurn(reasoning=reasoning)
    prose: list[str] = []
    pos = 0
    while True:
        start = _next_call_start(rest, pos)
        if start is None:
            prose.append(rest[pos:])
            break
        prose.append(rest[pos:start])
        if rest.startswith(TOOL_OPEN, start):
            body_start = start + len(TOOL_OPEN)
            end = rest.find(TOOL_CLOSE, body_start)
            # A missing </tool_call> ends the call at the next <tool_call> or the end of output.
            nxt = rest.find(TOOL_OPEN, body_start)
            if end == -1 or (nxt != -1 and nxt < end):
                end_body = nxt if nxt != -1 else len(rest)
                pos = end_body
            else:
                end_body, pos = end, end + len(TOOL_CLOSE)
            _parse_call_body(rest[body_start:end_body], rest[start:pos], len(turn.calls) + len(turn.errors) + 1, turn)
        else:  # a bare <function=...> without the <tool_call> wrapper
            end = rest.find("</function>", start)
            nxt = _FUNCTION_RE.search(rest, start + 1)
            if end == -1 or (nxt and nxt.start() < end):
                pos = nxt.start() if nxt else len(rest)
            else:
                pos = end + len("</function>")
            _parse_call_body(rest[start:pos], rest[start:pos], len(turn.calls) + len(turn.errors) + 1, turn)
    content = "".join(prose)
    if not turn.calls and not turn.errors and known_tools:
        content = _bare_json_calls(content, set(known_tools), turn)
    turn.content = content.strip()
    return turn


def _next_call_start(text: str, pos: int) -> int | None:
    candidates = [i for i in (text.find(TOOL_OPEN, pos),) if i != -1]
    func = _FUNCTION_RE.search(text, pos)
    if func:
        candidates.append(func.start())
    return min(candidates) if candidates else None


def _parse_call_body(body: str, raw: str, ordinal: int, turn: ParsedTurn) -> None:
    where = f"tool call #{ordinal}"
    stripped = body.strip()
    fenced = _FENCE_RE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    func = _FUNCTION_RE.search(stripped)
    if func and not stripped.startswith("{"):
        _parse_xml(stripped, func, raw, where, turn)
    elif stripped.startswith("{"):
        _parse_json(stripped, raw, where, turn)
    elif not stripped:
        turn.errors.append(f"{where} is empty: put `<function=NAME>` and its parameters between <tool_call> and </tool_call>.")
    else:
        turn.errors.append(
            f"{where} could not be read: expected `<function=NAME>` with `<parameter=KEY>VALUE</parameter>` "
            f"elements, or a JSON object {{\"name\": ..., \"arguments\": {{...}}}}; got {_preview(stripped)}."
        )


def _parse_xml(body: str, func: re.Match[str], raw: str, where: str, turn: ParsedTurn) -> None:
    name = func.group(1).strip()
    if not name:
        turn.errors.append(f"{where}: `<function=...>` has no tool name.")
        return
    args: dict[str, Any] = {}
    pos = func.end()
    while True:
        match = _PARAM_RE.search(body, pos)
        if not match:
            break
        key = match.group(1).strip()
        end = _PARAM_END_RE.search(body, match.end())
        value_end = end.start() if end else len(body)
        value = _strip_one_newline(body[match.end():value_end])
        pos = end.end() if end and end.group(0) == "</parameter>" else value_end
        if not key:
            turn.errors.append(f"{where} ({name}): a `<parameter=...>` tag has no name.")
            return
        if key in args:
            turn.errors.append(f"{where} ({name}): parameter '{key}' is given twice; give each parameter once.")
            return
        args[key] = value
    turn.calls.append(ParsedCall(name, args, raw, "xml"))


def _strip_one_newline(value: str) -> str:
    # Values sit on their own lines in the XML form; strip exactly that framing, keep indentation.
    if value.startswith("\n"):
        value = value[1:]
    elif value.startswith("\r\n"):
        value = value[2:]
    if value.endswith("\r\n"):
        value = value[:-2]
    elif value.endswith("\n"):
        value = value[:-1]
    return value


def _parse_json(body: str, raw: str, where: str, turn: ParsedTurn) -> None:
    try:
        obj, _ = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError as exc:
        obj = _lenient_object(body)
        if obj is None:
            turn.errors.append(f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}. {_preview(body)}")
            return
    call = _call_from_json(obj, where, turn)
    if call:
        name, args = call
        turn.calls.append(ParsedCall(name, args, raw, "json"))


def _lenient_object(body: str) -> Any:
    """Repair the two JSON drifts models commonly make: trailing commas, and Python-literal syntax
    (single quotes, True/False/None). Only used after strict parsing failed."""
    without_commas = _TRAILING_COMMA_RE.sub(r"\1", body)
    try:
        return json.JSONDecoder().raw_decode(without_commas)[0]
    except json.JSONDecodeError:
        pass
    end = body.rfind("}")
    try:
        value = ast.literal_eval(body[: end + 1]) if end != -1 else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _call_from_json(obj: Any, where: str, turn: ParsedTurn) -> tuple[str, dict[str, Any]] | None:
    if not isinstance(obj, dict):
        turn.errors.append(f"{where}: expected a JSON object with \"name\" and \"arguments\", got {type(obj).__name__}.")
        return None
    if isinstance(obj.get("function"), dict):  # OpenAI-style {"function": {"name", "arguments"}}
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        turn.errors.append(f"{where}: the JSON object has no \"name\" string naming the tool.")
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # double-encoded arguments
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            turn.errors.append(f"{where} ({name}): \"arguments\" is a string that is not valid JSON: {exc.msg}.")
            return None
    if not isinstance(args, dict):
        turn.errors.append(f"{where} ({name}): \"arguments\" must be a JSON object, got {type(args).__name__}.")
        return None
    return name.strip(), args


def _bare_json_calls(content: str, known: set[str], turn: ParsedTurn) -> str:
    """Fallback for models that print a call as plain JSON: accept objects naming a known tool."""
    kept: list[str] = []
    pos = 0
    decoder = json.JSONDecoder()
    for match in _BARE_JSON_RE.finditer(content):
        if match.start() < pos:
            continue
        try:
            obj, end = decoder.raw_decode(content, match.start())
        except json.JSONDecodeError:
            continue
        if not (isinstance(obj, dict) and obj.get("name") in known):
            continue
        scratch = ParsedTurn()
        call = _call_from_json(obj, "tool call", scratch)
        if call is None:
            continue
        kept.append(content[pos:match.start()])
        turn.calls.append(ParsedCall(call[0], call[1], content[match.start():end], "json"))
        pos = end
    kept.append(content[pos:])
    text = "".join(kept)
    return re.sub(r"```[a-zA-Z]*\s*```", "", text) if turn.calls else text


def _preview(text: str, limit: int = 80) -> str:
    one_line = " ".join(text.split())
    return repr(one_line if len(one_line) <= limit else one_line[:limit] + "…")

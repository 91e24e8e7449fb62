"""Model text → reasoning, prose and tool calls.

Accepts the Qwen3-Coder XML form (what Clover emits) and the Hermes JSON form, and the drifts real
models produce: a missing ``</tool_call>``, a missing ``</parameter>`` or ``</function>`` where the
next tag shows where it belonged, calls without the ``<tool_call>`` wrapper, JSON wrapped in code
fences, double-encoded JSON arguments, and — only as a fallback when no tagged call exists — bare JSON
calls printed as text. A call the reply ended inside of (token limit, stream cut) is an error, never
a call: see :mod:`xmlcall` for how the end of a value is found. Values keep their text exactly (XML)
or are JSON values (Hermes); types are fixed by :mod:`coerce`.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from clovercode.toolcalls.xmlcall import FUNCTION_RE, is_function_opener, scan_call

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CUT_ADVICE = ("Send it again, complete. If it is long, send it in smaller pieces: write a big file in parts "
              "(write_file with the first part, then edit_file to add the rest), or change an existing file with edit_file.")

_PROSE_TAG_RE = re.compile(r"<think>|</think>|<tool_call>|<function\s*=\s*[\"']?[^>\"'\s]*[\"']?\s*>")
_FENCE_OPEN_RE = re.compile(r"\s*```[a-zA-Z]*[ \t]*\n?\s*")
_FENCE_CLOSE_RE = re.compile(r"\s*```")
_SPACE_RE = re.compile(r"\s*")
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


def parse_turn(text: str, known_tools: Iterable[str] = ()) -> ParsedTurn:
    """Split a reply into reasoning, prose and calls, reading it left to right.

    Think blocks count as reasoning only outside calls (a value keeps its think tags); a ``</think>``
    before any ``<think>`` means the template opened the block, so everything before it is reasoning.
    """
    turn = ParsedTurn()
    reasoning: list[str] = []
    prose: list[str] = []
    pos, seen_think = 0, False
    while True:
        tag = _PROSE_TAG_RE.search(text, pos)
        if tag is None:
            prose.append(text[pos:])
            break
        prose.append(text[pos:tag.start()])
        word = tag.group(0)
        if word == THINK_OPEN:
            seen_think = True
            close = text.find(THINK_CLOSE, tag.end())
            reasoning.append(text[tag.end():] if close == -1 else text[tag.end():close])
            pos = len(text) if close == -1 else close + len(THINK_CLOSE)
        elif word == THINK_CLOSE:
            if not seen_think:  # what came before was reasoning, calls drafted in it included
                reasoning, prose = [text[:tag.start()]], []
                turn.calls.clear()
                turn.errors.clear()
                seen_think = True
            pos = tag.end()
        elif word == TOOL_OPEN or is_function_opener(text, tag):
            # An unfinished call swallows any </think> after it: reading that as the end of reasoning
            # the template opened could run an example call from the cut value, so it stays cut.
            pos = (_wrapped_call(text, tag.start(), turn) if word == TOOL_OPEN
                   else _xml_call(text, tag.start(), FUNCTION_RE.match(text, tag.start()) or tag, turn))
        else:  # `<function=...>` mentioned in prose, not a call
            prose.append(word)
            pos = tag.end()
    turn.reasoning = "\n\n".join(part.strip() for part in reasoning if part.strip())
    content = "".join(prose)
    if not turn.calls and not turn.errors and known_tools:
        content = _bare_json_calls(content, set(known_tools), turn)
    turn.content = content.strip()
    return turn


def _ordinal(turn: ParsedTurn) -> str:
    return f"tool call #{len(turn.calls) + len(turn.errors) + 1}"


def _wrapped_call(text: str, start: int, turn: ParsedTurn) -> int:
    """Parse the call opened by ``<tool_call>`` at ``start``; return where the text goes on."""
    body_start = start + len(TOOL_OPEN)
    close = text.find(TOOL_CLOSE, body_start)
    nxt = text.find(TOOL_OPEN, body_start)
    # Without </tool_call> (or before it, a new <tool_call>) the region ends there or at the end.
    if close == -1 or (nxt != -1 and nxt < close):
        region_end, pos, closed = (nxt if nxt != -1 else len(text)), (nxt if nxt != -1 else len(text)), False
    else:
        region_end, pos, closed = close, close + len(TOOL_CLOSE), True
    lead = _FENCE_OPEN_RE.match(text, body_start) or _SPACE_RE.match(text, body_start)
    first = lead.end()
    if text.startswith("{", first):
        json_end = _json_call(text, first, start, turn)
        if json_end is not None:
            return json_end
        body = text[body_start:region_end]
        if not closed and nxt == -1 and _lenient_object(_unfenced(body)) is None:
            turn.errors.append(f"{_ordinal(turn)} was not run: your reply ended in the middle of it, before its JSON "
                               f"object and `</tool_call>` were complete. {CUT_ADVICE}")
            return len(text)
        _parse_call_body(body, text[start:pos], turn)
        return pos
    func = FUNCTION_RE.search(text, body_start, region_end)
    if func is not None:
        return _xml_call(text, start, func, turn)
    _parse_call_body(text[body_start:region_end], text[start:pos], turn)
    return pos


def _json_call(text: str, first: int, start: int, turn: ParsedTurn) -> int | None:
    """A Hermes JSON call read by the JSON decoder itself, so a string value may hold ``</tool_call>``;
    None when that does not give a whole call (the region is then read as before, with its repairs)."""
    try:
        obj, end = json.JSONDecoder().raw_decode(text, first)
    except json.JSONDecodeError:
        return None
    fence = _FENCE_CLOSE_RE.match(text, end)
    after = fence.end() if fence else end
    while after < len(text) and text[after].isspace():
        after += 1
    if text.startswith(TOOL_CLOSE, after):
        after += len(TOOL_CLOSE)
    elif after < len(text) and not text.startswith(TOOL_OPEN, after):
        return None
    where = _ordinal(turn)
    call = _call_from_json(obj, where, turn)
    if call:
        turn.calls.append(ParsedCall(call[0], call[1], text[start:after], "json"))
    return after


def _xml_call(text: str, start: int, func: re.Match[str], turn: ParsedTurn) -> int:
    where = _ordinal(turn)
    call = scan_call(text, func)
    if call.status == "open":
        inside = f" (inside parameter '{call.open_param}')" if call.open_param else ""
        name = f" ({call.name})" if call.name else ""
        turn.errors.append(f"{where}{name} was not run: your reply ended in the middle of it{inside}, before "
                           f"`</function>`. {CUT_ADVICE}")
        return len(text)
    raw = text[start:call.end]
    if not call.name:
        turn.errors.append(f"{where}: `<function=...>` has no tool name.")
        return call.end
    args: dict[str, Any] = {}
    for key, value in call.params:
        if not key:
            turn.errors.append(f"{where} ({call.name}): a `<parameter=...>` tag has no name.")
            return call.end
        if key in args:
            turn.errors.append(f"{where} ({call.name}): parameter '{key}' is given twice; give each parameter once.")
            return call.end
        args[key] = value
    turn.calls.append(ParsedCall(call.name, args, raw, "xml"))
    return call.end


def _unfenced(body: str) -> str:
    stripped = body.strip()
    fenced = _FENCE_RE.match(stripped)
    return fenced.group(1).strip() if fenced else stripped


def _parse_call_body(body: str, raw: str, turn: ParsedTurn) -> None:
    where = _ordinal(turn)
    stripped = _unfenced(body)
    if stripped.startswith("{"):
        _parse_json(stripped, raw, where, turn)
    elif not stripped:
        turn.errors.append(f"{where} is empty: put `<function=NAME>` and its parameters between <tool_call> and </tool_call>.")
    else:
        turn.errors.append(
            f"{where} could not be read: expected `<function=NAME>` with `<parameter=KEY>VALUE</parameter>` "
            f"elements, or a JSON object {{\"name\": ..., \"arguments\": {{...}}}}; got {_preview(stripped)}."
        )


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

"""Where a Qwen3-Coder XML call ends, decided by its structure rather than by the first closing tag.

A value may legitimately hold ``</parameter>``, ``</function>``, ``</tool_call>`` or a whole example
call (a pom.xml, docs about tool calls, this project's own tests). So a closing tag closes a value
only where the structure allows it — what follows must be the next ``<parameter=``, ``</function>``,
``</tool_call>`` or the end of the reply — and a call written inside a value (an opener followed by
its function or JSON) is nested data whose closing tags are its own. When several closings fit, the
first one after which the rest of the reply reads cleanly wins (no stray closing tags in the prose
that follows). A call the reply ended inside of — cut by the token limit, a stream cut — is reported
``open`` and never runs: running half a ``write_file`` would write half a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Generator, Iterator

FUNCTION_RE = re.compile(r"<function\s*=\s*[\"']?([^>\"'\s]*)[\"']?\s*>")
PARAM_RE = re.compile(r"<parameter\s*=\s*[\"']?([^>\"'\s]*)[\"']?\s*>")
_TAG_RE = re.compile(r"<tool_call>|</tool_call>|</function>|</parameter>|<function\s*=[^>]*>|<parameter\s*=[^>]*>")
_CLOSERS = ("</parameter>", "</function>", "</tool_call>")
_FENCE_END_RE = re.compile(r"\s*```")
_NEXT_PART_RE = re.compile(r"<parameter\s*=|</function>|</tool_call>")
_OPENER_RE = re.compile(r"<tool_call>|<function\s*=")


@dataclass(frozen=True)
class XmlCall:
    """One scanned call: ``status`` is "clean" (closed, prose after it reads cleanly), "dirty" (closed,
    but stray closing tags follow) or "open" (the reply ended inside it)."""

    name: str
    params: tuple[tuple[str, str], ...]
    end: int
    status: str
    open_param: str | None = None  # the parameter whose value the reply ended in


def scan_call(text: str, func: re.Match[str]) -> XmlCall:
    """Scan the call whose ``<function=NAME>`` tag is ``func`` (inside a ``<tool_call>`` or bare)."""
    return _Scanner(text).call(func)


def is_call_opener(text: str, pos: int) -> bool:
    """A ``<tool_call>`` at ``pos`` that starts a call (its function tag or JSON follows), not a mention."""
    after = _skip_ws(text, pos + len("<tool_call>"))
    return text.startswith(("<function", "{", "```"), after) or after == len(text)


def is_function_opener(text: str, match: re.Match[str]) -> bool:
    """A ``<function=NAME>`` followed by its first parameter or its close: a call, not a mention."""
    after = _skip_ws(text, match.end())
    return after == len(text) or bool(PARAM_RE.match(text, after)) or text.startswith("</function>", after)


def prose_is_clean(text: str, pos: int) -> bool:
    """No stray closing tag between ``pos`` and the next call (or the end): a call really ended at ``pos``."""
    stop = len(text)
    opener = _OPENER_RE.search(text, pos)
    if opener:
        stop = opener.start()
    stretch = text[pos:stop]
    return not any(closer in stretch for closer in _CLOSERS)


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


@dataclass(frozen=True)
class _Rest:
    """How a call goes on from some point: its status, its parameters from there (a chain, so each
    parameter is added in constant time) and where it ends."""

    status: str  # clean | dirty | open
    end: int
    param: tuple[str, str] | None = None
    more: "_Rest | None" = None
    open_param: str | None = None

    def params(self) -> tuple[tuple[str, str], ...]:
        out, node = [], self
        while node is not None:
            if node.param is not None:
                out.append(node.param)
            node = node.more
        return tuple(out)


_RANK = {"clean": 0, "dirty": 1, "open": 2}
MAX_TRIES = 8  # closings tried per value once one read was found: bounds adversarial replies


class _Scanner:
    """Reads one call. Each "the call goes on from position P" question is answered once (memo) and
    without recursion (a stack of generators), so a value with thousands of tags cannot exhaust the stack."""

    def __init__(self, text: str):
        self.text = text
        self.memo: dict[int, _Rest] = {}

    def call(self, func: re.Match[str]) -> XmlCall:
        rest = self.params_from(func.end())
        return XmlCall(func.group(1).strip(), rest.params(), rest.end, rest.status, rest.open_param)

    def params_from(self, pos: int) -> _Rest:
        stack: list[tuple[int, Generator[int, _Rest, _Rest]]] = [(pos, self._params_from(pos))]
        result: _Rest | None = None
        while stack:
            at, steps = stack[-1]
            try:
                wanted = steps.send(result)  # type: ignore[arg-type]  # None starts a generator
            except StopIteration as done:
                self.memo[at] = done.value
                stack.pop()
                result = done.value
                continue
            if wanted in self.memo:
                result = self.memo[wanted]
            else:
                stack.append((wanted, self._params_from(wanted)))
                result = None
        return self.memo[pos]

    def _params_from(self, pos: int) -> Generator[int, _Rest, _Rest]:
        """The rest of a call from ``pos`` (between parameters); yields a position to ask how the call
        goes on from there."""
        text = self.text
        pos = _skip_ws(text, pos)
        if pos >= len(text):
            return _Rest("open", pos)
        param = PARAM_RE.match(text, pos)
        if param:
            key, start = param.group(1).strip(), param.end()
            best: _Rest | None = None
            tries = 0
            for close, how, at in self.value_ends(start):
                if close is None:  # the reply ended inside this value
                    rest = _Rest("open", len(text), open_param=key)
                else:
                    after = (yield at) if how == "params" else self.after_function(at)
                    rest = _Rest(after.status, after.end, (key, _strip_one_newline(text[start:close])), after,
                                 after.open_param)
                if rest.status == "clean":
                    return rest
                if best is None or _RANK[rest.status] < _RANK[best.status]:
                    best = rest
                tries += best.status != "open"
                if tries >= MAX_TRIES:
                    break
            assert best is not None  # value_ends always yields the end of the text last
            return best
        if text.startswith("</function>", pos):
            return self.after_function(pos + len("</function>"))
        if text.startswith("</tool_call>", pos):
            return self.closed(pos + len("</tool_call>"))
        # Stray text between parameters (a model's aside): skip it to the next structural tag.
        nxt = _NEXT_PART_RE.search(text, pos + 1)
        return (yield nxt.start()) if nxt else _Rest("open", len(text))

    def value_ends(self, start: int) -> Iterator[tuple[int | None, str, int]]:
        """Candidate ends of a value starting at ``start``, in order: (index, how the call goes on, from where)."""
        text = self.text
        nested: list[str] = []  # calls written inside the value: their closing tags are theirs
        for tag in _TAG_RE.finditer(text, start):
            word = tag.group(0)
            if word == "<tool_call>":
                if nested or is_call_opener(text, tag.start()):
                    nested.append("tool_call")
                continue
            if word.startswith("<function"):
                if nested or is_function_opener(text, tag):
                    nested.append("function")
                continue
            if nested:
                if word == "</function>" and nested[-1] == "function":
                    nested.pop()
                elif word == "</tool_call>" and "tool_call" in nested:
                    while nested.pop() != "tool_call":
                        pass
                continue
            after = _skip_ws(text, tag.end())
            if word == "</parameter>" and self._may_follow_parameter(after):
                yield tag.start(), "params", tag.end()
            elif word == "</function>" and self._may_follow_call(after):
                yield tag.start(), "function", tag.end()
            # A bare </tool_call> never closes a value: the engine stops at the first one, so one that
            # follows neither </parameter> nor </function> is far likelier a value cut there.
            elif word.startswith("<parameter") and (_at_line_start(text, tag.start())
                                                    or _short_plain(text[start:tag.start()])):
                # a missing </parameter> before the next parameter (a common drift), on its own line or
                # after a short one-line value (the compact form); inside a longer text it is the text's
                yield tag.start(), "params", tag.start()
        yield None, "open", len(text)

    def _may_follow_parameter(self, after: int) -> bool:
        text = self.text
        return (after == len(text) or text.startswith(("</function>", "</tool_call>"), after)
                or bool(PARAM_RE.match(text, after)))

    def _may_follow_call(self, after: int) -> bool:
        text = self.text
        return after == len(text) or text.startswith(("</tool_call>", "<tool_call>"), after) or bool(
            FUNCTION_RE.match(text, after))

    def after_function(self, pos: int) -> _Rest:
        """After ``</function>``: an optional code-fence close and ``</tool_call>`` belong to the call."""
        text = self.text
        fence = _FENCE_END_RE.match(text, pos)
        at = _skip_ws(text, fence.end() if fence else pos)
        if text.startswith("</tool_call>", at):
            return self.closed(at + len("</tool_call>"))
        return self.closed(pos)

    def closed(self, pos: int) -> _Rest:
        return _Rest("clean" if prose_is_clean(self.text, pos) else "dirty", pos)


def _short_plain(value: str) -> bool:
    """A value like ``a.py`` or ``3``: one short line with no markup of its own."""
    value = value.strip("\r\n")
    return len(value) <= 200 and "\n" not in value and "<" not in value


def _at_line_start(text: str, pos: int) -> bool:
    line_start = text.rfind("\n", 0, pos) + 1
    return line_start > 0 and not text[line_start:pos].strip()


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

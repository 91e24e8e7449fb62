"""Chat templates rendered with limits: a template ships with the model files and is someone else's code.

jinja2's immutable sandbox (what transformers uses) keeps a template away from Python's internals,
but not from the machine's time and memory: nested ``range(100000)`` loops run for hours, and
``{{ 'x' * 1000000000 }}`` asks for a gigabyte at once. Here every value a template builds (string,
list) is checked before it is built, the output is counted as it streams, and the template's own
code runs against a deadline. A template that goes past any of these raises :class:`TemplateLimit`
(a jinja2 ``SecurityError``), which the engine reports as a model error naming the model (exit 5).

The variables match ``tokenizer.apply_chat_template``: the tokenizer's special tokens, ``messages``
(reasoning also as ``reasoning_content`` and ``thinking``), ``tools``, ``add_generation_prompt`` and
the extra keyword arguments (``enable_thinking``).
"""

from __future__ import annotations

import functools
import json
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping

import jinja2
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

_WIDTH = re.compile(r"%[-+ #0]*(\d+|\*)|\{[^{}]*:[^{}]*?(\d{5,})")
_REASONING = ("reasoning_content", "thinking", "reasoning")


@dataclass(frozen=True)
class Limits:
    chars: int = 16_000_000  # the rendered prompt, and any one string or list built on the way
    seconds: float = 10.0  # the template's own code; a real one takes milliseconds


class TemplateLimit(SecurityError):
    """The chat template went past a limit (time, output size, a value too large)."""


class _Generation(Extension):
    """``{% generation %}`` (assistant-mask markers some templates carry) renders its body as is."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Callable[[], str]) -> str:
        return caller()


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment, with every allocation a template asks for bounded."""

    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def __init__(self, limits: Limits):
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols])
        self.limits = limits
        self.filters["tojson"] = _tojson
        self.globals.update(raise_exception=_raise, strftime_now=lambda fmt: datetime.now().strftime(fmt))
        self.filters = {name: self._bounded(f) for name, f in self.filters.items()}

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        limit = self.limits.chars
        if operator == "*":
            size, times = (_size(left), right) if _size(left) is not None else (_size(right), left)
            if size is not None and isinstance(times, int) and size * times > limit:
                raise TemplateLimit(f"a value of {size:,} × {times:,} items is over the limit of {limit:,}")
        elif operator == "+" and _size(left) is not None and _size(right) is not None:
            if _size(left) + _size(right) > limit:  # type: ignore[operator]
                raise TemplateLimit(f"a value of more than {limit:,} items")
        elif operator == "**" and isinstance(right, int) and abs(right) > 4096 and left not in (0, 1, -1):
            raise TemplateLimit(f"a power with exponent {right:,}")
        elif operator == "%" and isinstance(left, str):
            self._check_widths(left, right)
        return self._checked(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - jinja2's signature
        __self._check_arguments(args, kwargs)
        if callable(__obj) and getattr(__obj, "__name__", "") == "format" \
                and isinstance(getattr(__obj, "__self__", None), str):
            __self._check_widths(__obj.__self__, None)
        if getattr(__obj, "__name__", "") == "replace" and isinstance(getattr(__obj, "__self__", None), str) \
                and len(args) >= 2 and isinstance(args[1], str):
            grown = len(__obj.__self__) * max(1, len(args[1]))
            if grown > __self.limits.chars:
                raise TemplateLimit(f"a replace that could build {grown:,} characters")
        return __self._checked(super().call(__context, __obj, *args, **kwargs))

    def _bounded(self, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)  # keeps jinja's pass_context / pass_environment markers
        def bounded(*args: Any, **kwargs: Any) -> Any:
            self._check_arguments(args, kwargs)
            return self._checked(function(*args, **kwargs))

        return bounded

    def _check_arguments(self, args: tuple, kwargs: Mapping[str, Any]) -> None:
        for value in (*args, *kwargs.values()):
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > self.limits.chars:
                raise TemplateLimit(f"an argument of {value:,} is over the limit of {self.limits.chars:,}")

    def _check_widths(self, text: str, _: Any) -> None:
        for match in _WIDTH.finditer(text):
            width = match.group(1) or match.group(2)
            if width == "*" or (width and int(width) > self.limits.chars):
                raise TemplateLimit("a format width over the limit")

    def _checked(self, value: Any) -> Any:
        size = _size(value)
        if size is not None and size > self.limits.chars:
            raise TemplateLimit(f"a value of {size:,} items is over the limit of {self.limits.chars:,}")
        return value


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, list, tuple, dict)) else None


def _tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # transformers' own filter: Jinja's escapes HTML, which a prompt must not have
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise TemplateError(message)


@functools.lru_cache(maxsize=8)
def _compiled(source: str, limits: Limits) -> jinja2.Template:
    return BoundedEnvironment(limits).from_string(source)


def render(source: str, variables: Mapping[str, Any], limits: Limits = Limits()) -> str:
    """``source`` rendered with ``variables`` within ``limits``; a TemplateLimit when it goes past one."""
    template = _compiled(source, limits)
    parts, total = [], 0
    try:
        with _Deadline(limits.seconds):
            for part in template.generate(**variables):
                total += len(part)
                if total > limits.chars:
                    raise TemplateLimit(f"the template wrote more than {limits.chars:,} characters")
                parts.append(part)
    except _TimeUp:
        raise TemplateLimit(f"the template ran past its time limit of {limits.seconds:g} s") from None
    return "".join(parts)


class _TimeUp(TemplateLimit):
    """Raised in the rendering thread by :class:`_Deadline` (an asynchronous exception takes no arguments)."""


class _Deadline:
    """At ``seconds``, :class:`_TimeUp` is raised in the thread that entered, between two of its bytecodes,
    by a timer thread (CPython's ``PyThreadState_SetAsyncExc``, the call a debugger's "raise here" uses).
    Not a trace function: a tracer that puts itself back on every call (coverage.py's does) silently
    removed the old trace-hook deadline, and a template then ran for hours. One long C-level operation is
    bounded by the size checks, not by this. A raise that fires as the render ends lands inside it, so none escapes."""

    def __init__(self, seconds: float):
        import threading

        self.seconds, self.lock, self.fired, self.done = seconds, threading.Lock(), False, False
        self.thread = threading.get_ident()
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True

    def _fire(self) -> None:
        with self.lock:
            if not self.done:
                self.fired = True
                _set_async_exc(self.thread, _TimeUp)

    def __enter__(self) -> "_Deadline":
        self.timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: Any) -> None:
        try:  # a raise fired as the render ended lands in here, and stops here
            self.timer.cancel()
            with self.lock:
                self.done = True
                pending = self.fired and kind is not _TimeUp
            for _ in range(10_000 if pending else 0):  # bytecodes for it to land on
                pass
        except _TimeUp:
            pass
        # Never PyThreadState_SetAsyncExc(thread, NULL) to take a raise back: on 3.11 it leaves the
        # interpreter's "something pending" flag set, and under a tracer the thread hangs in its next call.


def _set_async_exc(thread: int, exc: type[BaseException]) -> None:
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exc))


def chat_variables(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                   **extra: Any) -> dict[str, Any]:
    """What ``tokenizer.apply_chat_template`` hands a template, for ``messages`` and ``tools``."""
    special = {k: v for k, v in (getattr(tokenizer, "special_tokens_map", None) or {}).items()}
    chat = []
    for message in messages:
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in _REASONING if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        chat.append(message)
    return {**special, "messages": chat, "tools": tools, "documents": None, "add_generation_prompt": True, **extra}

"""Chat templates rendered with limits: a template ships with the model files and is someone else's code.

jinja2's immutable sandbox (what transformers uses) keeps a template away from Python's internals,
but not from the machine's time and memory: nested ``range(100000)`` loops run for hours, and
``{{ 'x' * 1000000000 }}`` asks for a gigabyte at once. Here the template runs in a restricted
environment (engine/templatebounds.py: allowlisted operators, filters, methods and globals, every
size computed before it is built), the output is counted as it streams, and the template's own
code runs against a deadline. A template that goes past any of these raises :class:`TemplateLimit`
(a jinja2 ``SecurityError``), which the engine reports as a model error naming the model (exit 5).

The variables match ``tokenizer.apply_chat_template``: the tokenizer's special tokens, ``messages``
(reasoning also as ``reasoning_content`` and ``thinking``), ``tools``, ``add_generation_prompt`` and
the extra keyword arguments (``enable_thinking``).
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

import jinja2

from clovercode.engine.templatebounds import BoundedEnvironment, Limits, TemplateLimit

__all__ = ["BoundedEnvironment", "Limits", "TemplateLimit", "chat_variables", "render"]

_REASONING = ("reasoning_content", "thinking", "reasoning")


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
    except jinja2.TemplateError:
        raise
    except (ArithmeticError, LookupError, TypeError, ValueError, RecursionError) as exc:
        # the template's own code failed (``2.0 ** 99999``, ``int('x')``, a macro calling itself):
        # a template error naming what, which the engine reports as a model error, never a traceback
        raise jinja2.TemplateError(f"the template raised {type(exc).__name__}: {exc}") from None
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
        # The clock starts once the timer thread is running and the entering thread is past start():
        # a short deadline that fired inside Thread.start() (under load the new thread can run its whole
        # wait before start() returns) broke the threading module's own bookkeeping there (a KeyError)
        self.armed, self.cancelled = threading.Event(), threading.Event()
        self.timer = threading.Thread(target=self._count, name="clovercode-template-deadline", daemon=True)

    def _count(self) -> None:
        self.armed.wait()
        if not self.cancelled.wait(self.seconds):
            self._fire()

    def _fire(self) -> None:
        with self.lock:
            if not self.done:
                self.fired = True
                _set_async_exc(self.thread, _TimeUp)

    def __enter__(self) -> "_Deadline":
        self.timer.start()
        self.armed.set()  # a raise from here on leaves __enter__ as the time limit, nothing else
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: Any) -> None:
        try:  # a raise fired as the render ended lands in here, and stops here
            self.cancelled.set()
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

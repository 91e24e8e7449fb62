"""The restricted Jinja environment chat templates run in: an allowlist of operators, filters,
methods and globals, each with its arguments bounded and its output size computed *before* the
C-level operation that would allocate it (issue 45 point 7).

jinja2's immutable sandbox keeps a template away from Python's internals; what it leaves open is one
C call that builds a gigabyte or runs a minute: ``'%.999999999d' % 1``, ``'%999999999d'|format(1)``,
``(s|replace('x', big))``, ``big_list|join``, ``'{:{}{}}'.format(x, 9999, 99999)`` (a width built
from two arguments), ``(9 ** 4096) ** 4096``, ``s ~ s ~ s ~ …``. Here:

- operators (``+ - * / // % **`` and ``~``): numbers stay under :data:`MAX_INT_BITS`; strings and
  lists are sized by their *weight* (every character they hold, nested) before they are combined;
- ``%`` and ``str.format``: each conversion's width and precision is a literal of at most
  :data:`MAX_WIDTH` (no ``*``, no nested ``{}`` in a format spec), and the output is bounded by
  the format's fields times the arguments' weight;
- filters: only those in :data:`FILTERS`, each with an estimator run on its arguments first
  (``join``, ``replace``, ``format``, ``center``, ``indent``, ``wordwrap``, ``tojson``, ``sum`` of
  numbers only); string methods: only those in :data:`STR_METHODS`, the growing ones estimated;
- globals: ``range`` (jinja's, bounded), ``dict``, ``namespace``, ``cycler``, ``joiner``, and the two
  transformers adds; ``lipsum`` is gone.

Whatever is refused raises :class:`TemplateLimit`, which the engine reports naming the file (exit 5).
"""

from __future__ import annotations

import functools
import json
import re
import string
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping

import jinja2
from jinja2.compiler import CodeGenerator
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_INT_BITS = 8192  # about 2,500 digits: no template needs more, and each step stays microseconds
MAX_WIDTH = 4096  # a width or precision in a format; real templates use none or two digits
_PRINTF = re.compile(r"%(?:\([^)]*\))?([-+ #0]*)(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.S)
_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(\d*)[,_]?(?:\.(\d+))?[bcdeEfFgGnosxX%]?", re.S)


@dataclass(frozen=True)
class Limits:
    chars: int = 16_000_000  # the rendered prompt, and any one string or list built on the way
    seconds: float = 10.0  # the template's own code; a real one takes milliseconds


class TemplateLimit(SecurityError):
    """The chat template went past a limit (time, output size, a value too large, an operation off the list)."""


def weight(value: Any, limit: int, depth: int = 0) -> int:
    """An upper bound on the characters ``value`` turns into (str, repr, JSON), nested; stops
    counting once past ``limit``."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int):
        return value.bit_length() // 3 + 2
    if isinstance(value, float):
        return 24
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        if depth > 64:
            raise TemplateLimit("a value nested more than 64 deep")
        total = 2
        for item in (value.items() if isinstance(value, dict) else value):
            total += 2 + (weight(item[0], limit, depth + 1) + weight(item[1], limit, depth + 1) + 2
                          if isinstance(value, dict) else weight(item, limit, depth + 1))
            if total > limit:
                break
        return total
    return 64  # an object a template can hold (undefined, namespace, loop): its str is short


class _Generation(Extension):
    """``{% generation %}`` (assistant-mask markers some templates carry) renders its body as is."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Callable[[], str]) -> str:
        return caller()


class _Generator(CodeGenerator):
    """``a ~ b ~ …`` is one C-level join jinja does not intercept: its parts are sized first."""

    def visit_Concat(self, node: Any, frame: Any) -> None:  # jinja's, with the parts passed through the guard
        if frame.eval_ctx.volatile:
            join = "(markup_join if context.eval_ctx.volatile else str_join)"
        else:
            join = "markup_join" if frame.eval_ctx.autoescape else "str_join"
        self.write(f"{join}(environment.concat_guard((")
        for part in node.nodes:
            self.visit(part, frame)
            self.write(", ")
        self.write(")))")


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment, restricted to an allowlist with bounded arguments."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    code_generator_class = _Generator

    def __init__(self, limits: Limits):
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols],
                         finalize=self._finalize)
        self.limits = limits
        self.filters["tojson"] = _tojson
        self.filters = {name: self._bounded(name, f) for name, f in self.filters.items() if name in FILTERS}
        self.globals = {name: self.globals[name] for name in ("range", "dict", "namespace", "cycler", "joiner")}
        self.globals.update(raise_exception=_raise, strftime_now=lambda fmt: datetime.now().strftime(fmt))

    # --- sizes ---------------------------------------------------------------------------------
    def _weight(self, value: Any) -> int:
        return weight(value, self.limits.chars)

    def _refuse_over(self, size: int, what: str) -> None:
        if size > self.limits.chars:
            raise TemplateLimit(f"{what} would build {size:,} characters, over the limit of {self.limits.chars:,}")

    def _finalize(self, value: Any) -> Any:
        if not isinstance(value, str):  # what {{ }} turns into text: sized before str() builds it
            self._refuse_over(self._weight(value) * 10, "writing out a value")  # repr: 10 per char at most
        return value

    def concat_guard(self, parts: tuple) -> tuple:
        """The parts of ``a ~ b ~ …``, sized before jinja joins them (see _Generator)."""
        self._refuse_over(sum(self._weight(p) * (1 if isinstance(p, str) else 10) for p in parts), "a ~ join")
        return parts

    # --- operators -----------------------------------------------------------------------------
    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        numbers = (int, float)
        if isinstance(left, numbers) and isinstance(right, numbers):
            self._check_arithmetic(operator, left, right)
        elif operator == "%" and isinstance(left, str):
            self._refuse_over(_printf_size(left, right, self._weight), "a % format")
        elif operator == "*":
            times, value = (right, left) if isinstance(right, int) else (left, right)
            if isinstance(times, int) and not isinstance(value, numbers):
                self._refuse_over(self._weight(value) * max(times, 0), "a repetition")
        elif operator == "+":
            self._refuse_over(self._weight(left) + self._weight(right), "a concatenation")
        return super().call_binop(context, operator, left, right)

    def _check_arithmetic(self, operator: str, left: Any, right: Any) -> None:
        if not (isinstance(left, int) and isinstance(right, int)):
            return  # floats overflow to an error, never to a big allocation
        bits = max(left.bit_length(), 1)
        if operator == "**" and right > 0 and left not in (0, 1, -1):
            size = bits * right
        elif operator == "*":
            size = bits + right.bit_length()
        else:
            size = max(bits, right.bit_length()) + 1
        if size > MAX_INT_BITS:
            raise TemplateLimit(f"an integer of about {size:,} bits (the limit is {MAX_INT_BITS:,}) from {operator}")

    # --- methods -------------------------------------------------------------------------------
    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - jinja2's signature
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str) and callable(__obj):
            name = getattr(__obj, "__name__", "")
            if name not in STR_METHODS:
                raise TemplateLimit(f"the string method {name!r} is not one a chat template may call")
            if name == "join" and args and not isinstance(args[0], (list, tuple, str, dict)):
                args = (list(args[0]), *args[1:])  # sized before joined
            __self._refuse_over(_str_method_size(owner, name, args, kwargs, __self._weight), f"str.{name}")
        return __self._checked(super().call(__context, __obj, *args, **kwargs))

    def wrap_str_format(self, value: Any) -> Any:
        """jinja hands out ``str.format`` already wrapped, at attribute access: sized there too."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        text, name = value.__self__, value.__name__

        @functools.wraps(wrapped)
        def sized(*args: Any, **kwargs: Any) -> Any:
            self._refuse_over(_str_method_size(text, name, args, kwargs, self._weight), f"str.{name}")
            return self._checked(wrapped(*args, **kwargs))

        return sized

    # --- filters -------------------------------------------------------------------------------
    def _bounded(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        passes = getattr(function, "jinja_pass_arg", None) is not None

        @functools.wraps(function)  # keeps jinja's pass_context / pass_environment markers
        def bounded(*args: Any, **kwargs: Any) -> Any:
            head, rest = (args[:1], list(args[1:])) if passes else ((), list(args))
            if name == "join" and rest and not isinstance(rest[0], (list, tuple, str, dict)):
                rest[0] = list(rest[0])  # a generator: sized before joined
            estimate = FILTERS[name]
            if estimate is not None:
                self._refuse_over(estimate(self._weight, *rest, **kwargs), f"the {name} filter")
            return self._checked(function(*head, *rest, **kwargs))

        return bounded

    def _checked(self, value: Any) -> Any:
        if isinstance(value, (str, list, tuple, dict)) and len(value) > self.limits.chars:
            raise TemplateLimit(f"a value of {len(value):,} items is over the limit of {self.limits.chars:,}")
        return value


# --- estimators: an upper bound on a result's size, from the arguments alone -----------------------
Weigh = Callable[[Any], int]


def _width(value: Any, what: str) -> int:
    if value in ("*", None) or (isinstance(value, str) and not value.isdigit()):
        if value == "*":
            raise TemplateLimit(f"a {what} taken from the arguments ('*')")
        return 0
    number = int(value)
    if number > MAX_WIDTH:
        raise TemplateLimit(f"a {what} of {number:,} (the limit is {MAX_WIDTH:,})")
    return number


def _printf_size(fmt: str, values: Any, weigh: Weigh) -> int:
    conversions = [m for m in _PRINTF.finditer(fmt) if m.group(4) != "%"]
    per = weigh(values) * (10 if any(m.group(4) in "ra" for m in conversions) else 1)
    return len(fmt) + sum(_width(m.group(2), "width") + _width(m.group(3) or None, "precision") + per + 32
                          for m in conversions)


def _format_size(fmt: str, args: tuple, kwargs: Mapping[str, Any], weigh: Weigh) -> int:
    total, per = len(fmt), weigh(list(args)) + weigh(dict(kwargs))
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError as exc:
        raise TemplateLimit(f"a format string that does not parse: {exc}") from None
    for _, field, spec, conversion in fields:
        if field is None:
            continue
        spec = spec or ""
        if "{" in spec:
            raise TemplateLimit("a format spec built from the arguments (a nested '{}' width)")
        shape = _SPEC.fullmatch(spec)
        if shape is None:
            raise TemplateLimit(f"a format spec {spec[:40]!r} outside the standard ones")
        total += _width(shape.group(1) or None, "width") + _width(shape.group(2), "precision") + \
            per * (10 if conversion in ("r", "a") else 1) + 32
    return total


def _str_method_size(text: str, name: str, args: tuple, kwargs: Mapping[str, Any], weigh: Weigh) -> int:
    if name in ("format", "format_map"):
        mapping = args[0] if name == "format_map" and args else {}
        return _format_size(text, args if name == "format" else (), {**kwargs, **dict(mapping)}, weigh)
    if name == "join":
        items = args[0] if args else ()
        return weigh(list(items)) + len(text) * max(len(items) - 1, 0)
    if name == "replace":
        return _replace_size(text, *args)
    if name in ("center", "ljust", "rjust", "zfill"):
        width = args[0] if args else kwargs.get("width", 0)
        return len(text) + (width if isinstance(width, int) else 0)
    if name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        return len(text) * max(1, size if isinstance(size, int) else 8)
    return len(text) * 3 + 32  # upper() may turn ß into SS; nothing on the list grows more


def _replace_size(text: Any, old: Any = "", new: Any = "", count: Any = None, *_: Any) -> int:
    text, old, new = str(text), str(old), str(new)
    found = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    return len(text) + found * max(len(new) - len(old), 0)


def _join_size(weigh: Weigh, value: Any = (), d: Any = "", attribute: Any = None) -> int:
    items = list(value) if not isinstance(value, (list, tuple, str, dict)) else value
    return weigh(items) + len(str(d)) * max(len(items) - 1, 0)


def _indent_size(weigh: Weigh, s: Any = "", width: Any = 4, first: Any = False, blank: Any = False) -> int:
    pad = len(width) if isinstance(width, str) else _width(width if isinstance(width, int) else 0, "indent")
    text = str(s)
    return len(text) + (text.count("\n") + 1) * pad


def _center_size(weigh: Weigh, value: Any = "", width: Any = 80) -> int:
    return weigh(value) + (_width(width, "width") if isinstance(width, int) else 0)


def _wordwrap_size(weigh: Weigh, s: Any = "", width: Any = 79, break_long_words: Any = True,
                   wrapstring: Any = None, break_on_hyphens: Any = True) -> int:
    if isinstance(width, int) and width < 1:
        raise TemplateLimit("a wordwrap width under 1")
    return len(str(s)) * (2 + len(str(wrapstring or "\n")))


def _tojson_size(weigh: Weigh, value: Any = None, ensure_ascii: Any = False, indent: Any = None, *_: Any,
                 **__: Any) -> int:
    step = indent if isinstance(indent, int) else len(indent) if isinstance(indent, str) else 0
    if step > 16:
        raise TemplateLimit(f"a JSON indent of {step:,} (the limit is 16)")
    return weigh(value) * (6 + step * 4)


def _sum_size(weigh: Weigh, iterable: Any = (), attribute: Any = None, start: Any = 0) -> int:
    if not isinstance(start, (int, float)):  # lists or strings summed are quadratic, in C
        raise TemplateLimit("sum of anything but numbers")
    return 0


def _batch_size(weigh: Weigh, value: Any = (), count: Any = 1, fill_with: Any = None) -> int:
    # batch pads the last group, slice every one, with ``fill_with``: ``count`` copies at most
    if not isinstance(count, int) or count < 1:
        return 0  # jinja's own error
    return weigh(value) + count * (2 + (weigh(fill_with) if fill_with is not None else 0))


def _format_filter_size(weigh: Weigh, value: Any = "", *args: Any, **kwargs: Any) -> int:
    return _printf_size(str(value), kwargs or args, weigh)


def _grows(factor: int) -> Callable[..., int]:
    return lambda weigh, value=None, *_, **__: weigh(value) * factor


# The filters a chat template may use: name -> an estimator of the output (None: never larger than the input).
FILTERS: dict[str, Callable[..., int] | None] = {
    "abs": None, "attr": None, "batch": _batch_size, "capitalize": None, "count": None, "d": None, "default": None,
    "dictsort": None, "first": None, "float": None, "groupby": None, "int": None, "items": None, "last": None,
    "length": None, "list": None, "lower": None, "map": None, "max": None, "min": None, "reject": None,
    "rejectattr": None, "reverse": None, "round": None, "safe": None, "select": None, "selectattr": None,
    "slice": _batch_size, "sort": None, "striptags": None, "title": _grows(1), "trim": None, "truncate": None,
    "unique": None, "upper": _grows(3), "wordcount": None, "e": _grows(6), "escape": _grows(6),
    "forceescape": _grows(6), "string": _grows(10), "join": _join_size, "replace": lambda w, *a, **k: _replace_size(*a, **k),
    "format": _format_filter_size, "center": _center_size, "indent": _indent_size, "wordwrap": _wordwrap_size,
    "tojson": _tojson_size, "sum": _sum_size,
}
# The string methods a chat template may call (the growing ones estimated in _str_method_size).
STR_METHODS = frozenset({
    "format", "format_map", "join", "replace", "center", "ljust", "rjust", "zfill", "expandtabs", "split",
    "rsplit", "splitlines", "strip", "lstrip", "rstrip", "lower", "upper", "title", "capitalize", "casefold",
    "swapcase", "startswith", "endswith", "find", "rfind", "index", "rindex", "count", "partition", "rpartition",
    "removeprefix", "removesuffix", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
    "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper",
})


def _tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # transformers' own filter: Jinja's escapes HTML, which a prompt must not have
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise TemplateError(message)

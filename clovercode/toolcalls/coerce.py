"""Fix the types of tool arguments from their schema: XML values arrive as strings."""

from __future__ import annotations

import ast
import json
from typing import Any

_TRUE = {"true", "yes", "1"}
_FALSE = {"false", "no", "0"}


def coerce_arguments(args: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``args`` with string values converted to the property types the schema asks
    for. Values that do not convert are left alone so validation reports them precisely."""
    props = schema.get("properties", {})
    return {key: coerce_value(value, props[key]) if key in props else value for key, value in args.items()}


def coerce_value(value: Any, schema: dict[str, Any]) -> Any:
    if not isinstance(value, str):
        return value
    types = schema.get("type")
    types = types if isinstance(types, list) else [types] if types else []
    if not types or "string" in types:
        return value
    for kind in types:
        converted = _convert(value.strip(), kind)
        if converted is not _FAIL:
            return converted
    return value


_FAIL = object()


def _convert(text: str, kind: str) -> Any:
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                return _FAIL
            return int(number) if number.is_integer() else _FAIL
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            return _FAIL
        return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
    if kind == "boolean":
        low = text.lower()
        return True if low in _TRUE else False if low in _FALSE else _FAIL
    if kind == "null":
        return None if text.lower() in ("null", "none", "") else _FAIL
    if kind in ("object", "array"):
        for loader in (json.loads, ast.literal_eval):
            try:
                value = loader(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(value, dict if kind == "object" else (list, tuple)):
                return list(value) if isinstance(value, tuple) else value
        return _FAIL
    return _FAIL

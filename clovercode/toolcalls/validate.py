"""Check each parsed call against its tool's JSON Schema; build the error text the model receives."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from clovercode.toolcalls.coerce import coerce_arguments
from clovercode.toolcalls.parser import ParsedCall
from clovercode.toolcalls.schemas import ToolSpec, signature

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError


@dataclass(frozen=True)
class CheckedCall:
    """A call after validation: ``error`` is None when it may run."""

    id: str
    name: str
    arguments: dict[str, Any]
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Validator:
    """Validates calls against a fixed set of tool specs (each validator compiled once, at its tool's
    first call: jsonschema takes a noticeable part of a headless run's start-up, docs/usage.md)."""

    def __init__(self, specs: Sequence[ToolSpec], starting: Mapping[str, str] | None = None):
        """``starting``: name prefix → MCP server, for tools still to come (a server that is starting),
        so a call of one is told to wait rather than that the tool does not exist."""
        self.specs = {s.name: s for s in specs}
        self._validators: dict[str, Any] = {}
        self.starting = dict(starting or {})

    def check(self, call: ParsedCall, call_id: str) -> CheckedCall:
        spec = self.specs.get(call.name)
        if spec is None:
            coming = next((server for prefix, server in self.starting.items() if call.name.startswith(prefix)), None)
            message = (f"Tool `{call.name}` is not available yet: its MCP server '{coming}' is still starting. Its "
                       "tools join when it is ready; go on with other tools and try again in a later turn."
                       if coming else unknown_tool_message(call.name, list(self.specs)))
            return CheckedCall(call_id, call.name, call.arguments, message)
        args = coerce_arguments(call.arguments, spec.schema)
        errors = sorted(self._validator(spec).iter_errors(args), key=lambda e: (list(e.absolute_path), e.message))
        if not errors:
            return CheckedCall(call_id, spec.name, args)
        return CheckedCall(call_id, spec.name, args, invalid_arguments_message(spec, args, errors))

    def _validator(self, spec: ToolSpec):  # noqa: ANN202 - a jsonschema validator
        if spec.name not in self._validators:
            from jsonschema import Draft202012Validator

            self._validators[spec.name] = Draft202012Validator(spec.schema)
        return self._validators[spec.name]


def unknown_tool_message(name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
    hint = f" Did you mean `{close[0]}`?" if close else ""
    return f"Unknown tool `{name}`.{hint} Valid tools: {', '.join(sorted(valid))}."


def invalid_arguments_message(spec: ToolSpec, args: dict[str, Any], errors: list[ValidationError]) -> str:
    lines = [f"Tool call `{spec.name}` was not run: its arguments do not match the schema."]
    props = list(spec.schema.get("properties", {}))
    for err in errors:
        path = "$" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        lines.append(f"- at {path}: {_describe(err, props)}")
    lines.append(f"Expected arguments: {signature(spec)}")
    lines.append("Fix the call and try again.")
    return "\n".join(lines)


def _describe(err: ValidationError, props: list[str]) -> str:
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        hints = []
        for key in extra:
            close = difflib.get_close_matches(key, props, n=1, cutoff=0.5)
            hints.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        return f"unexpected parameter {', '.join(hints)} (constraint: additionalProperties is false)"
    if err.validator == "required":
        return f"{err.message} (constraint: required)"
    shown = json.dumps(err.instance, ensure_ascii=False) if not isinstance(err.instance, str) else repr(err.instance)
    if len(shown) > 60:
        shown = shown[:60] + "…"
    return f"value {shown} violates `{err.validator}: {json.dumps(err.validator_value)}` ({err.message if len(err.message) < 120 else err.message[:120] + '…'})"

"""Tool specs loaded from the JSON Schemas in ``tools/`` — the single source of truth for tools."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from clovercode.ground.resources import data_dir


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    schema: dict[str, Any]

    @property
    def parameters(self) -> dict[str, Any]:
        """The schema without the document-level keys, as OpenAI-style tool definitions want it."""
        return {k: v for k, v in self.schema.items() if k not in ("$schema", "$id", "title", "description")}

    def openai_tool(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


def load_tool_specs(directory: Path | None = None, names: Iterable[str] | None = None) -> list[ToolSpec]:
    """Every ``*.json`` in the tools directory, sorted by name, optionally restricted to ``names``.

    Another directory's schemas are checked as JSON Schema here; the shipped ones are checked by a test
    (tests/test_startup_imports.py) instead of at every start: jsonschema is a third of a headless run's
    imports."""
    check = directory is not None
    directory = directory or data_dir("tools")
    wanted = set(names) if names is not None else None
    specs = []
    for path in sorted(directory.glob("*.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        if check:
            from jsonschema import Draft202012Validator  # here: the engine imports ToolSpec on machines without it

            Draft202012Validator.check_schema(schema)
        name = schema.get("title") or path.stem
        if wanted is None or name in wanted:
            specs.append(ToolSpec(name=name, description=schema.get("description", ""), schema=schema))
    return specs


def signature(spec: ToolSpec) -> str:
    """A one-line shape of the arguments, e.g. ``{"path": string (required), "start_line": integer ≥1}``."""
    props = spec.schema.get("properties", {})
    required = set(spec.schema.get("required", []))
    parts = []
    for key, sub in props.items():
        parts.append(f'"{key}": {_shape(sub)}' + (" (required)" if key in required else ""))
    return "{" + ", ".join(parts) + "}"


def _shape(sub: dict[str, Any]) -> str:
    kind = sub.get("type", "any")
    kind = " | ".join(kind) if isinstance(kind, list) else kind
    if "enum" in sub:
        kind = " | ".join(json.dumps(v) for v in sub["enum"])
    bounds = []
    if "minimum" in sub:
        bounds.append(f"≥{sub['minimum']}")
    if "exclusiveMinimum" in sub:
        bounds.append(f">{sub['exclusiveMinimum']}")
    if "maximum" in sub:
        bounds.append(f"≤{sub['maximum']}")
    if sub.get("minLength"):
        bounds.append("non-empty")
    return kind + (" " + ", ".join(bounds) if bounds else "")

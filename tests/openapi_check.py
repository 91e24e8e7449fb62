"""Check HTTP requests and answers against GitHub's OpenAPI 3.0 description with jsonschema.

OpenAPI 3.0 schemas are JSON Schema draft 4 plus ``nullable``; :func:`to_json_schema` rewrites
``nullable: true`` as "or null" so a plain draft-4 validator can judge them. Request bodies are held to
the documented properties only (additionalProperties: false at the top): stricter than GitHub, which
ignores unknown fields, because an unknown field in clovercode's request is a bug even if GitHub
shrugs it off.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import jsonschema


def to_json_schema(node: Any) -> Any:
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v) for k, v in node.items() if k not in ("nullable", "example", "examples")}
    if node.get("nullable") is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


@dataclass
class Operation:
    method: str
    template: str  # /repos/{owner}/{repo}/pulls
    spec: dict[str, Any]

    @property
    def id(self) -> str:
        return self.spec.get("operationId", f"{self.method} {self.template}")


class OpenApi:
    def __init__(self, path: Path):
        self.doc = json.loads(path.read_text(encoding="utf-8"))
        self._patterns = [(re.compile("^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(t)) + "$"), t)
                          for t in self.doc["paths"]]

    @cached_property
    def components(self) -> dict[str, Any]:
        return to_json_schema(self.doc["components"])

    def resolve(self, node: Any) -> Any:
        """Follow ``$ref`` chains inside the raw document (parameters, responses, examples)."""
        while isinstance(node, dict) and "$ref" in node:
            target = self.doc
            for part in node_path(node_ref_of(node)):
                target = target[part]
            node = target
        return node

    def operation(self, method: str, path: str) -> Operation | None:
        # A literal segment beats a template one (/repos/{o}/{r}/pulls vs /repos/{o}/{r}/{x}): fewest braces wins.
        matches = [t for regex, t in self._patterns if regex.match(path) and method.lower() in self.doc["paths"][t]]
        if not matches:
            return None
        template = min(matches, key=lambda t: t.count("{"))
        return Operation(method.upper(), template, self.doc["paths"][template][method.lower()])

    def validate(self, instance: Any, schema: dict[str, Any]) -> list[str]:
        root = {**to_json_schema(schema), "components": self.components}
        validator = jsonschema.Draft4Validator(root)
        return [f"{'/'.join(map(str, e.absolute_path)) or '(body)'}: {e.message[:300]}"
                for e in sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.path)))]

    def check_request(self, op: Operation, query: dict[str, list[str]], body: Any) -> list[str]:
        errors = []
        params = [self.resolve(p) for p in op.spec.get("parameters", [])]
        known = {p["name"] for p in params if p.get("in") == "query"}
        for name, values in query.items():
            if name not in known:
                errors.append(f"query parameter '{name}' is not documented for {op.id}")
        for param in params:
            if param.get("in") != "query" or param["name"] not in query:
                continue
            for value in query[param["name"]]:
                schema = param.get("schema", {})
                instance: Any = value
                if schema.get("type") == "integer":
                    instance = int(value) if value.lstrip("-").isdigit() else value
                errors += [f"query {param['name']}: {e}" for e in self.validate(instance, schema)]
        request_body = self.resolve(op.spec.get("requestBody")) if op.spec.get("requestBody") else None
        if request_body is None:
            if body is not None:
                errors.append(f"{op.id} takes no request body")
            return errors
        if body is None:
            if request_body.get("required"):
                errors.append(f"{op.id} requires a JSON body")
            return errors
        schema = dict(self.resolve(request_body["content"]["application/json"]["schema"]))
        if schema.get("type") == "object" and "properties" in schema:
            schema.setdefault("additionalProperties", False)
        return errors + self.validate(body, schema)

    def check_response(self, op: Operation, status: int, body: Any) -> list[str]:
        responses = op.spec.get("responses", {})
        answer = self.resolve(responses.get(str(status)) or responses.get("default") or {})
        if not answer:
            return [f"{op.id} documents no {status} answer"]
        content = (answer.get("content") or {}).get("application/json")
        if content is None:
            return [] if body is None else [f"{op.id} {status} documents no JSON body"]
        return self.validate(body, content["schema"])

    def example(self, op: Operation, status: int) -> Any:
        """The documented example answer, as a fresh object to modify."""
        content = self.resolve(op.spec["responses"][str(status)])["content"]["application/json"]
        example = next(iter(content["examples"].values()))
        example = self.resolve(example)
        value = example["value"]
        return json.loads(json.dumps(self.resolve(value) if isinstance(value, dict) and "$ref" in value else value))


def complete(api: OpenApi, instance: Any, schema: Any) -> Any:
    """Fill the required properties GitHub's own examples leave out, so a fake answer matches its schema."""
    schema = _deref(api, schema)
    if not isinstance(schema, dict):
        return instance
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [_deref(api, o) for o in schema[key]]
            if instance is None and any(o.get("type") == "null" for o in options):
                return None
            typed = [o for o in options if o.get("type") != "null"]
            fits = [o for o in typed if _fits(instance, o)] or typed
            return complete(api, instance, fits[0]) if fits else instance
    if "allOf" in schema:
        for part in schema["allOf"]:
            instance = complete(api, instance, part)
        return instance
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        instance = dict(instance) if isinstance(instance, dict) else {}
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in instance:
                instance[name] = complete(api, None, properties.get(name, {})) if name in properties else None
        for name, value in list(instance.items()):
            if name in properties:
                instance[name] = complete(api, value, properties[name])
        return instance
    if kind == "array":
        items = schema.get("items", {})
        return [complete(api, item, items) for item in instance] if isinstance(instance, list) else []
    if instance is not None:
        return instance
    if "enum" in schema:
        return schema["enum"][0]
    return {"string": "", "integer": 0, "number": 0, "boolean": False}.get(kind)


def _fits(instance: Any, schema: dict[str, Any]) -> bool:
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}
    expected = kinds.get(schema.get("type", "object" if "properties" in schema else ""))
    return expected is not None and isinstance(instance, expected)


def _deref(api: OpenApi, schema: Any) -> Any:
    while isinstance(schema, dict) and "$ref" in schema:
        target: Any = {"components": api.components}
        for part in node_path(node_ref_of(schema)):
            target = target[part]
        schema = target
    return schema


def node_ref_of(node: dict[str, Any]) -> str:
    ref = node["$ref"]
    if not ref.startswith("#/"):
        raise ValueError(f"only local references are supported, got {ref}")
    return ref


def node_path(ref: str) -> list[str]:
    return [part.replace("~1", "/").replace("~0", "~") for part in ref[2:].split("/")]

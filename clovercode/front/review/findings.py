"""A review finding: the `report_finding` tool's JSON Schema, and the finding the model's call becomes.

The model reports each finding with a tool call, so the loop checks it against this schema like any
other call (a malformed finding goes back to the model as a format error, never into a review).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

from clovercode.toolcalls.schemas import ToolSpec

SEVERITIES = ("high", "medium", "low", "nit")
SUGGESTION_MAX_LINES = 20  # a "small change": longer replacements are described, not suggested

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "report_finding",
    "description": "Report one problem in the change under review: where it is (a file and lines of the new "
                   "version), how serious it is, and what to do. Call it once per problem, then call finish.",
    "type": "object",
    "properties": {
        "file": {"type": "string", "minLength": 1, "maxLength": 500, "description": "Project-relative path."},
        "start_line": {"type": "integer", "minimum": 1, "description": "First line (new version of the file)."},
        "end_line": {"type": "integer", "minimum": 1, "description": "Last line (at least start_line)."},
        "severity": {"type": "string", "enum": list(SEVERITIES)},
        "title": {"type": "string", "minLength": 1, "maxLength": 120, "description": "One line: what is wrong."},
        "body": {"type": "string", "minLength": 1, "maxLength": 3000, "description": "Why it is wrong and what to do."},
        "suggestion": {"type": "string", "maxLength": 4000,
                       "description": "Optional: the exact replacement text for lines start_line..end_line, "
                                      "when the fix is a small change there."},
    },
    "required": ["file", "start_line", "end_line", "severity", "title", "body"],
    "additionalProperties": False,
}

TOOL = ToolSpec("report_finding", str(SCHEMA["description"]), SCHEMA)


@dataclass(frozen=True)
class Finding:
    file: str
    start_line: int
    end_line: int
    severity: str
    title: str
    body: str
    suggestion: str | None = None

    @classmethod
    def from_call(cls, args: dict[str, Any]) -> "Finding":
        start, end = int(args["start_line"]), int(args["end_line"])
        start, end = min(start, end), max(start, end)
        suggestion = args.get("suggestion")
        if not isinstance(suggestion, str) or suggestion.count("\n") >= SUGGESTION_MAX_LINES:
            suggestion = None
        return cls(str(args["file"]).strip().removeprefix("./"), start, end, str(args["severity"]),
                   str(args["title"]).strip(), str(args["body"]).strip(), suggestion)

    @property
    def key(self) -> str:
        """The same finding on a later run has the same key: where it is and what it says (a re-run
        does not post its line comment twice)."""
        text = f"{self.file}\0{self.end_line}\0{self.title.strip().lower()}"
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if data["suggestion"] is None:
            del data["suggestion"]
        return data

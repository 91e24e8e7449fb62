"""Definitions and references of one source file, extracted with its language's tag query."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from clovercode.context.grammars import Grammar

SIGNATURE_CHARS = 160  # a signature longer than this is cut: the map is an outline, not the code
MAX_INDENT = 16
GENERATED_MARKERS = re.compile(rb"@generated|do not edit|auto-?generated", re.IGNORECASE)
MINIFIED_LINE_CHARS = 400  # average line length above which a file is minified or generated
BUNDLE_LINE_CHARS = 5000  # one line this long near the top: a bundle or minified build, whatever the average
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Definition:
    name: str
    kind: str
    line: int  # 1-based
    signature: str  # the header as one line, with its original indentation


class FileTags:
    """What the map knows of one file. ``skipped`` says why a file was not parsed (binary, generated).

    ``names`` lists the definitions' names in order; ranking needs nothing more. The definitions
    themselves (lines, signatures: most of the cached bytes) are decoded from the cache only when
    asked for, which on a warm map is a few dozen files out of thousands."""

    __slots__ = ("language", "refs", "skipped", "names", "_defs", "_raw")
    # ``_raw``: the details as JSON, or a function that fetches that JSON from the cache when asked.

    def __init__(self, language: str, defs: list[Definition] | None = None, refs: dict[str, int] | None = None,
                 skipped: str = ""):
        self.language, self.refs, self.skipped = language, refs if refs is not None else {}, skipped
        self._defs: list[Definition] | None = list(defs or [])
        self._raw: Any = None
        self.names = [d.name for d in self._defs]

    @property
    def defs(self) -> list[Definition]:
        if self._defs is None:
            raw = self._raw() if callable(self._raw) else self._raw
            self._defs = decode_details(raw, self.names)
            self._raw = None
        return self._defs

    def details_pending(self) -> bool:
        """True while the definitions still have to be fetched from the cache."""
        return self._defs is None and callable(self._raw)

    def supply_details(self, raw: str) -> None:
        """The definitions' JSON, fetched together with other files' (instead of one query each)."""
        if self._defs is None:
            self._raw = raw

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileTags) and (self.language, self.skipped, self.refs, self.defs) == (
            other.language, other.skipped, other.refs, other.defs)

    def __repr__(self) -> str:
        return f"FileTags({self.language!r}, {len(self.names)} defs, {len(self.refs)} refs, skipped={self.skipped!r})"

    def to_json(self) -> dict[str, Any]:
        return {"l": self.language, "s": self.skipped, "r": self.refs,
                "d": [[d.name, d.kind, d.line, d.signature] for d in self.defs]}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "FileTags":
        return FileTags(data["l"], [Definition(*d) for d in data["d"]], data["r"], data.get("s", ""))

    def cache_columns(self) -> tuple[str, str]:
        """(everything but the definitions' details, the details) as two JSON texts."""
        head = {"l": self.language, "s": self.skipped, "r": self.refs, "n": self.names}
        details = [[d.name, d.kind, d.line, d.signature] for d in self.defs]
        return json.dumps(head, separators=(",", ":")), json.dumps(details, separators=(",", ":"))

    @staticmethod
    def from_cache_columns(head: str, details: Any) -> "FileTags":
        """Tags from the cache's two columns; ``details`` may be a function that fetches them later."""
        data = json.loads(head)
        tags = FileTags(data["l"], None, data["r"], data.get("s", ""))
        names = data["n"]
        if not isinstance(names, list) or not isinstance(tags.refs, dict):
            raise ValueError("damaged cache row")
        tags.names, tags._defs, tags._raw = names, None, details
        return tags


def decode_details(raw: str | None, names: list[str]) -> list[Definition]:
    """Definitions from their cached JSON; a damaged row keeps the names and loses the details."""
    try:
        defs = [Definition(*d) for d in json.loads(raw or "[]")]
    except (ValueError, TypeError):
        defs = []
    if [d.name for d in defs] != names:
        defs = [Definition(name, "?", 0, name) for name in names]
    return defs


def skip_reason(source: bytes, keep_generated: bool = False) -> str:
    """Why a file should stay out of the map (binary; unless ``keep_generated``: generated, minified), or ''."""
    head = source[:8192]
    if b"\0" in head:
        return "binary"
    if keep_generated:
        return ""
    if GENERATED_MARKERS.search(source[:1024]):
        return "generated"
    lines = source.count(b"\n") + 1
    if len(source) > 4096 and len(source) / lines > MINIFIED_LINE_CHARS:
        return "minified"
    if len(source) > BUNDLE_LINE_CHARS and _has_long_line(source[:65536]):
        return "minified"
    return ""


def _has_long_line(head: bytes) -> bool:
    return max(map(len, head.split(b"\n"))) > BUNDLE_LINE_CHARS


def extract(grammar: Grammar, source: bytes, keep_generated: bool = False) -> FileTags:
    """Parse ``source`` and run the tag query: definitions with signatures, reference counts."""
    from tree_sitter import QueryCursor

    reason = skip_reason(source, keep_generated)
    if reason:
        return FileTags(grammar.name, skipped=reason)
    tree = grammar.parser.parse(source)
    defs: list[Definition] = []
    prototypes: list[Definition] = []
    counts: dict[bytes, int] = {}
    patterns = grammar.patterns
    # The hot loop of a cold map (hundreds of thousands of matches): which captures a match can hold is
    # known per pattern, and reference names are counted as bytes and decoded once per distinct name.
    for index, captures in QueryCursor(grammar.query).matches(tree.root_node):
        kind, ref_keys = patterns[index]
        if kind is not None and kind in captures and "name" in captures:
            node, name_node = captures[kind][0], captures["name"][0]
            name = _text(source, name_node)
            definition = Definition(name, kind[11:], node.start_point[0] + 1, signature(source, node, name))
            (prototypes if definition.kind == "prototype" else defs).append(definition)
            continue
        for key in ref_keys:
            for node in captures.get(key, ()):
                text = node.text
                counts[text] = counts.get(text, 0) + 1
    refs: dict[str, int] = {}
    for raw, count in counts.items():
        name = raw.decode("utf-8", errors="replace")
        refs[name] = refs.get(name, 0) + count
    defined = {d.name for d in defs}
    defs.extend(p for p in prototypes if p.name not in defined)
    return FileTags(grammar.name, _unique_sorted(defs), refs)


def _unique_sorted(defs: list[Definition]) -> list[Definition]:
    seen: set[tuple[str, int]] = set()
    out = []
    for d in sorted(defs, key=lambda d: (d.line, d.name)):
        if (d.name, d.line) not in seen:  # two patterns may match the same definition
            seen.add((d.name, d.line))
            out.append(d)
    return out


def _text(source: bytes, node: Any) -> str:
    return source[node.start_byte:node.end_byte].decode("utf-8", errors="replace")


def signature(source: bytes, node: Any, name: str) -> str:
    """The definition's header: from the start of its first line to its body, on one line."""
    line_start = source.rfind(b"\n", 0, node.start_byte) + 1
    body = node.child_by_field_name("body")
    if body is not None and body.start_byte > node.start_byte:
        end = body.start_byte
    else:
        end = source.find(b"\n", node.start_byte)
        end = len(source) if end == -1 else end
    raw = source[line_start:min(end, line_start + 4 * SIGNATURE_CHARS)].decode("utf-8", errors="replace")
    stripped = raw.lstrip()
    indent = raw[:len(raw) - len(stripped)].expandtabs(4)
    text = _SPACE.sub(" ", stripped).rstrip(" {")
    if name not in text:  # e.g. `typedef struct point {` ... `} Point;`
        text = f"{text} … {name}"
    if len(text) > SIGNATURE_CHARS:
        text = text[:SIGNATURE_CHARS - 1] + "…"
    return " " * min(len(indent), MAX_INDENT) + text

"""Which language a file is written in, and its tree-sitter parser + tag query (from ``queries/*.scm``)."""

from __future__ import annotations

import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clovercode.ground.errors import UsageError

QUERY_DIR = Path(__file__).resolve().parent / "queries"

# Extension → grammar name in tree-sitter-language-pack. Headers go to C++: its grammar reads C
# headers too, and C++ headers would lose their classes under the C grammar.
EXTENSIONS: dict[str, str] = {
    ".py": "python", ".pyi": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "cpp", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".c++": "cpp", ".hpp": "cpp", ".hh": "cpp",
    ".hxx": "cpp", ".h++": "cpp", ".ipp": "cpp", ".tpp": "cpp",
}

_INHERITS = re.compile(r"^;\s*inherits:\s*(.+)$")


class ContextUnavailable(UsageError):
    """The repository map needs tree-sitter, which is missing or broken here."""


# What the repository map imports beyond the core install: the `context` extra (pyproject.toml).
MAP_MODULES = ("numpy", "tree_sitter", "tree_sitter_language_pack")
MAP_OFF_HINT = "install clovercode[context]"


def map_missing() -> list[str]:
    """The modules of the `context` extra that are not installed here (empty: the map can be built).
    Looked up without importing them, so a core install pays nothing for asking."""
    return [name for name in MAP_MODULES if not _findable(name)]


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a half-removed package
        return False


def map_off_note(missing: list[str]) -> str:
    """The one line a run without the `context` extra says instead of crashing."""
    return f"repository map off: {MAP_OFF_HINT} (missing: {', '.join(missing)})"


def require_map_modules() -> None:
    """Raise the clear error ``clovercode map`` gives when the `context` extra is not installed."""
    missing = map_missing()
    if missing:
        raise ContextUnavailable(f"the repository map needs the context extra ({', '.join(missing)} not installed)",
                                 hint="Install it: pip install 'clovercode[context]'.")


def language_for(path: str) -> str | None:
    """The grammar name for a file name, or None when the map does not read that kind of file."""
    dot = path.rfind(".")
    return EXTENSIONS.get(path[dot:].lower()) if dot != -1 else None


def query_source(language: str, _seen: tuple[str, ...] = ()) -> str:
    """The tag query text of ``language``, with ``; inherits:`` files prepended."""
    if language in _seen:
        raise ContextUnavailable(f"tag queries inherit in a cycle: {' -> '.join(_seen + (language,))}")
    path = QUERY_DIR / f"{language}-tags.scm"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ContextUnavailable(f"tag query {path} cannot be read: {exc.strerror or exc}") from None
    first = text.split("\n", 1)[0].strip()
    match = _INHERITS.match(first)
    if not match:
        return text
    parents = [name.strip() for name in match.group(1).split(",") if name.strip()]
    return "\n".join([*(query_source(p, _seen + (language,)) for p in parents), text])


def queries_fingerprint() -> str:
    """Changes whenever a query file changes, so cached tags made by older queries are dropped."""
    digest = hashlib.sha256()
    for path in sorted(QUERY_DIR.glob("*.scm")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


_CAPTURE = re.compile(r"@([\w.]+)")


@dataclass
class Grammar:
    name: str
    parser: Any  # tree_sitter.Parser
    query: Any  # tree_sitter.Query
    # Per query pattern: its ``definition.KIND`` capture (or None) and its ``reference.KIND`` captures.
    patterns: list[tuple[str | None, tuple[str, ...]]]


def pattern_captures(query: Any, source: str) -> list[tuple[str | None, tuple[str, ...]]]:
    """What each pattern of ``query`` (compiled from ``source``) captures, read from its text."""
    raw = source.encode("utf-8")
    out = []
    for index in range(query.pattern_count):
        names = _CAPTURE.findall(raw[query.start_byte_for_pattern(index):query.end_byte_for_pattern(index)].decode())
        kind = next((n for n in names if n.startswith("definition.")), None)
        out.append((kind, tuple(dict.fromkeys(n for n in names if n.startswith("reference.")))))
    return out


class Grammars:
    """Loads each grammar and its compiled query once, on first use (tree-sitter imports stay lazy)."""

    def __init__(self) -> None:
        self._loaded: dict[str, Grammar] = {}

    def get(self, language: str) -> Grammar:
        grammar = self._loaded.get(language)
        if grammar is None:
            grammar = self._loaded[language] = load_grammar(language)
        return grammar


def load_grammar(language: str) -> Grammar:
    try:
        from tree_sitter import Query, QueryError
        from tree_sitter_language_pack import get_language, get_parser
    except ImportError as exc:
        raise ContextUnavailable(
            f"the repository map needs tree-sitter, which is not installed ({exc.name})",
            hint="Install the context extra: pip install 'clovercode[context]'.") from None
    try:
        lang, parser = get_language(language), get_parser(language)  # type: ignore[arg-type]
    except Exception as exc:  # the pack raises LookupError / RuntimeError depending on version
        raise ContextUnavailable(f"no tree-sitter grammar for {language}: {exc}",
                                 hint="tree-sitter-language-pack must be a version below 1.0.") from None
    source = query_source(language)
    try:
        query = Query(lang, source)
    except QueryError as exc:
        raise ContextUnavailable(f"the tag query for {language} does not fit its grammar: {exc}") from None
    return Grammar(language, parser, query, pattern_captures(query, source))

"""Tag extraction on real code, one fixture per language, parsed by the real tree-sitter grammars."""

from pathlib import Path

import pytest

from clovercode.context.grammars import Grammars, language_for, load_grammar, query_source
from clovercode.context.tags import extract, skip_reason

LANGS = Path(__file__).resolve().parent / "fixtures" / "context" / "langs"

# file → (language, {definition name: kind}, references that must be seen)
EXPECTED = {
    "sample.py": ("python",
                  {"MAX_ITEMS": "constant", "Inventory": "class", "__init__": "function", "size": "function",
                   "refresh": "function", "make_inventory": "function"},
                  {"Base", "Item", "Ordered", "OrderedDict", "fetch_items", "getcwd", "property"}),
    "sample.js": ("javascript",
                  {"Widget": "class", "constructor": "method", "render": "method", "createWidget": "function",
                   "formatLabel": "constant", "counter": "function"},
                  {"Base", "helper", "append", "Widget", "trim"}),
    "sample.ts": ("typescript",
                  {"Shape": "interface", "ShapeList": "type", "Color": "enum", "Polygon": "class", "Square": "class",
                   "computeArea": "function", "area": "method", "describe": "constant", "Geometry": "module"},
                  {"Shape", "Polygon", "computeArea"}),
    "sample.tsx": ("tsx",
                   {"ButtonProps": "interface", "Button": "function", "Panel": "constant", "Modal": "class",
                    "render": "method"},
                   {"ButtonProps", "renderTitle", "Button"}),
    "sample.go": ("go",
                  {"Pi": "constant", "Shape": "type", "Circle": "type", "Area": "method", "NewCircle": "function",
                   "Meters": "type"},
                  {"Println", "Circle", "float64"}),
    "sample.rs": ("rust",
                  {"LIMIT": "constant", "Cache": "struct", "Entry": "enum", "Store": "trait", "fetch": "function",
                   "new": "function", "square": "macro", "inner": "module", "helper": "function", "Alias": "type"},
                  {"HashMap", "Entry", "cloned", "compute", "new"}),
    "Sample.java": ("java",
                    {"Sample": "class", "run": "method", "Listener": "interface", "onEvent": "method", "Mode": "enum",
                     "Point": "class"},
                    {"BaseSample", "Runnable", "print", "size", "Event"}),
    "sample.c": ("c",
                 {"BUFFER_SIZE": "macro", "MIN": "macro", "Point": "type", "point": "struct", "node": "struct",
                  "color": "enum", "distance": "function", "print_point": "function"},
                 {"MIN", "abs_diff", "printf", "Point"}),
    "sample.cpp": ("cpp",
                   {"geo": "module", "Shape": "class", "Rect": "struct", "area": "method", "clamp_value": "function",
                    "perimeter": "method", "Shapes": "type"},
                   {"min", "max", "compute_perimeter", "Shape"}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_language_yields_its_definitions_and_references(name):
    language, defs, refs = EXPECTED[name]
    assert language_for(name) == language
    tags = extract(load_grammar(language), (LANGS / name).read_bytes())
    found = {(d.name, d.kind) for d in tags.defs}
    for symbol, kind in defs.items():
        assert (symbol, kind) in found, f"{name}: {symbol} should be a {kind}; found {sorted(found)}"
    assert refs <= set(tags.refs), f"{name}: missing references {refs - set(tags.refs)}"


def test_signatures_are_headers_with_indentation_and_lines():
    tags = extract(load_grammar("python"), (LANGS / "sample.py").read_bytes())
    by_name = {d.name: d for d in tags.defs}
    assert by_name["Inventory"].signature == "class Inventory(Base):"
    assert by_name["Inventory"].line == 9
    assert by_name["__init__"].signature == "    def __init__(self, items: list[Item]):"
    go = {d.signature for d in extract(load_grammar("go"), (LANGS / "sample.go").read_bytes()).defs}
    assert "func (c Circle) Area() float64" in go
    c = {d.name: d.signature for d in extract(load_grammar("c"), (LANGS / "sample.c").read_bytes()).defs}
    assert c["Point"] == "typedef struct point … Point"  # the name comes after the body: it is appended


def test_multiline_headers_become_one_line():
    source = b"def long_function(\n    first,\n    second,\n):\n    return first\n"
    (d,) = extract(load_grammar("python"), source).defs
    assert d.signature == "def long_function( first, second, ):"


def test_prototype_is_dropped_when_the_file_defines_the_function():
    tags = extract(load_grammar("c"), (LANGS / "sample.c").read_bytes())
    assert [d.line for d in tags.defs if d.name == "distance"] == [19]
    header = extract(load_grammar("cpp"), b"int api_call(int x);\nstruct opts { int a; };\n")
    assert {d.name: d.kind for d in header.defs} == {"api_call": "prototype", "opts": "struct"}


def test_binary_generated_and_minified_sources_are_skipped():
    assert skip_reason(b"\x00\x01binary") == "binary"
    assert skip_reason(b"// Code generated by protoc-gen-go. DO NOT EDIT.\npackage x\n") == "generated"
    assert skip_reason(b"var a=1;" * 2000) == "minified"
    assert skip_reason(b"def ok():\n    return 1\n") == ""
    tags = extract(load_grammar("go"), b"// Code generated by stringer. DO NOT EDIT.\npackage p\nfunc F() {}\n")
    assert tags.skipped == "generated" and tags.defs == []


def test_queries_inherit_and_every_grammar_loads():
    assert "(function_declaration" in query_source("typescript")  # from ecma-tags.scm
    assert "jsx_self_closing_element" in query_source("tsx")
    grammars = Grammars()
    for language in ("python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp"):
        assert grammars.get(language).name == language
    assert grammars.get("python") is grammars.get("python")


def test_unknown_extensions_are_not_read():
    assert language_for("notes.txt") is None
    assert language_for("Makefile") is None
    assert language_for("x/y/header.HPP") == "cpp"

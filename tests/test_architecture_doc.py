"""docs/architecture.md draws exactly the layers the import contracts (.importlinter) enforce.

Regenerate the drawing after changing the contracts: ``python tests/test_architecture_doc.py``
prints the block to paste between the markers.
"""

from __future__ import annotations

import configparser
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONTRACTS = REPO / ".importlinter"
DOC = REPO / "docs" / "architecture.md"
BEGIN = "<!-- layers: drawn from .importlinter; tests/test_architecture_doc.py checks it -->"
END = "<!-- /layers -->"


def _lines(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]


def _short(name: str) -> str:
    return name.replace("clovercode.", "")


def layers_block(contracts_text: str) -> str:
    """The drawing of the contracts: the layers top to bottom, the forbidden imports, the exceptions."""
    parser = configparser.ConfigParser()
    parser.read_string(contracts_text)
    contracts = [parser[s] for s in parser.sections() if s.startswith("importlinter:contract:")]
    out = ["```", "layers, top to bottom: each imports only those below it", '("|": never import each other; ":": may)']
    excepted: list[str] = []
    forbidden: list[str] = []
    for contract in contracts:
        if contract["type"] == "layers":
            out += [f"  {_short(layer)}" for layer in _lines(contract["layers"])]
        elif contract["type"] == "forbidden":
            sources = ", ".join(_short(m) for m in _lines(contract["source_modules"]))
            banned = ", ".join(_short(m) for m in _lines(contract["forbidden_modules"]))
            forbidden.append(f"  {sources} ↛ {banned}")
        excepted += [f"  {_short(a).strip()} → {_short(b).strip()}"
                     for a, _, b in (line.partition("->") for line in _lines(contract.get("ignore_imports", "")))]
    out += ["never, directly or through others", *forbidden]
    out += ["no cycles among the modules of one package", "excepted, each with its reason in .importlinter", *excepted]
    return "\n".join([*out, "```"])


def test_the_doc_draws_the_contracts() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert BEGIN in doc and END in doc, f"docs/architecture.md lacks the markers {BEGIN} … {END}"
    drawn = doc.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert drawn == layers_block(CONTRACTS.read_text(encoding="utf-8")), \
        "docs/architecture.md's layers differ from .importlinter: run python tests/test_architecture_doc.py"


def test_a_changed_contract_changes_the_drawing() -> None:
    text = CONTRACTS.read_text(encoding="utf-8")
    moved = text.replace("    clovercode.agent\n", "    clovercode.agent : clovercode.hooks\n", 1)
    assert moved != text
    assert layers_block(moved) != layers_block(text)


def test_every_package_sits_in_a_layer() -> None:
    parser = configparser.ConfigParser()
    parser.read_string(CONTRACTS.read_text(encoding="utf-8"))
    layered = {name.strip() for section in parser.sections() if parser[section].get("type") == "layers"
               for layer in _lines(parser[section]["layers"]) for name in layer.replace("|", ":").split(":")}
    package = REPO / "clovercode"
    present = {f"clovercode.{p.name}" for p in package.iterdir() if (p / "__init__.py").is_file()}
    present |= {f"clovercode.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    assert present - layered == set(), "a package or root module that no layer names: add it to .importlinter"


if __name__ == "__main__":
    sys.stdout.write(f"{BEGIN}\n{layers_block(CONTRACTS.read_text(encoding='utf-8'))}\n{END}\n")

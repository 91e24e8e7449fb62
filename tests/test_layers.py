"""Lower layers never import upper ones: the engine knows no agent (read from the source, not by convention)."""

from __future__ import annotations

import ast
from pathlib import Path

import clovercode

PACKAGE = Path(clovercode.__file__).parent
# What the engine may import of clovercode: itself and the neutral modules below the agent.
ENGINE_MAY_IMPORT = {"clovercode.engine", "clovercode.ground.errors", "clovercode.ground.heartbeat", "clovercode.ground.messages",
                     "clovercode.ground.resources", "clovercode.ground.boundedjson", "clovercode.ground.privatefiles",
                     "clovercode.toolcalls", "clovercode.trust"}


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("clovercode")}


def test_the_engine_imports_nothing_above_it() -> None:
    offending = {}
    for path in sorted((PACKAGE / "engine").rglob("*.py")):
        bad = {m for m in imported_modules(path)
               if not any(m == allowed or m.startswith(allowed + ".") for allowed in ENGINE_MAY_IMPORT)}
        if bad:
            offending[path.name] = sorted(bad)
    assert offending == {}


def test_the_message_type_lives_outside_the_agent() -> None:
    assert imported_modules(PACKAGE / "ground" / "messages.py") == set()
    assert not (PACKAGE / "agent" / "messages.py").exists()


def test_the_vocabulary_below_the_agent_imports_only_the_ground_floor() -> None:
    for name in ("events.py", "conversation.py", "messages.py"):
        assert {m for m in imported_modules(PACKAGE / "ground" / name) if not m.startswith("clovercode.ground.")} == set()


def test_at_most_eight_modules_sit_directly_in_the_package() -> None:
    assert len(list(PACKAGE.glob("*.py"))) <= 8


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from clovercode.agent.loop import Agent\nimport clovercode.ui.live\n", encoding="utf-8")
    assert imported_modules(source) == {"clovercode.agent.loop", "clovercode.ui.live"}

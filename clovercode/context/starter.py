"""``clovercode init``: a starter AGENTS.md filled in with what the project's files reveal."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from clovercode.actions.listing import project_files
from clovercode.context.grammars import language_for
from clovercode.context.instructions import INSTRUCTIONS_FILE
from clovercode.context.selection import WALK_SKIP
from clovercode.ground.errors import UsageError
from clovercode.trust.projectview import ProjectView

LANGUAGE_NAMES = {"python": "Python", "javascript": "JavaScript", "typescript": "TypeScript", "tsx": "TypeScript (TSX)",
                  "go": "Go", "rust": "Rust", "java": "Java", "c": "C", "cpp": "C/C++"}


def detect_commands(root: Path) -> list[tuple[str, str]]:
    """(what, command) pairs for building and testing, from the project's manifest files."""
    found: list[tuple[str, str]] = []
    if (root / "package.json").is_file():
        try:
            scripts = json.loads(_read(root / "package.json")).get("scripts", {})
        except (ValueError, AttributeError):
            scripts = {}
        for name in ("build", "test", "lint"):
            if isinstance(scripts, dict) and name in scripts:
                found.append((name.capitalize(), f"npm run {name}" if name != "test" else "npm test"))
    if (root / "pyproject.toml").is_file() or (root / "setup.py").is_file() or (root / "requirements.txt").is_file():
        uses_pytest = (root / "pytest.ini").is_file() or (root / "conftest.py").is_file() or (root / "tests").is_dir() \
            or "pytest" in _read(root / "pyproject.toml")
        found.append(("Test", "python -m pytest -q" if uses_pytest else "python -m unittest"))
    elif list(root.glob("test_*.py")) or list(root.glob("*_test.py")):
        found.append(("Test", "python -m unittest"))
    if (root / "go.mod").is_file():
        found += [("Build", "go build ./..."), ("Test", "go test ./...")]
    if (root / "Cargo.toml").is_file():
        found += [("Build", "cargo build"), ("Test", "cargo test")]
    if (root / "pom.xml").is_file():
        found.append(("Test", "mvn -q test"))
    elif (root / "build.gradle").is_file() or (root / "build.gradle.kts").is_file():
        found.append(("Test", "./gradlew test"))
    if (root / "CMakeLists.txt").is_file():
        found += [("Build", "cmake -S . -B build && cmake --build build"), ("Test", "ctest --test-dir build")]
    elif (root / "Makefile").is_file():
        found.append(("Build", "make"))
    return found


def _read(path: Path) -> str:
    """A manifest's text (``path``: the root joined with its name), through the project view."""
    try:
        return ProjectView(path.parent).read_bytes(path.name).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def starter_text(root: Path) -> str:
    counts = Counter(language_for(p.name) for p in project_files(root, skip_dirs=WALK_SKIP))
    counts.pop(None, None)
    languages = ", ".join(f"{LANGUAGE_NAMES.get(lang, lang)} ({n} files)" for lang, n in counts.most_common(5))
    commands = detect_commands(root)
    command_lines = "\n".join(f"- {what}: `{cmd}`" for what, cmd in commands) or \
        "- Test: `<the command that runs the tests>`"
    return f"""# AGENTS.md

Instructions for coding agents (clovercode, and other tools that read AGENTS.md) working in this
repository. Agents include this file verbatim in their prompt: keep it short, concrete and true.
An AGENTS.md in a subdirectory adds rules for the code below it.

## Project
<What this project does, in one or two sentences, and where its main code lives.>
Languages: {languages or "<none detected>"}.

## Build and test
{command_lines}
- Run the tests after every change and before you finish; fix what you broke.

## Conventions
- Follow the style of the file you are editing; keep changes small and focused on the task.
- Add or update tests with every change in behaviour.
- <Naming, error handling, logging or layout rules specific to this project.>

## Boundaries
- Do not edit generated or vendored files, lock files or secrets (`.env`).
- <Directories or files agents must not touch, and anything that needs a person's review.>
"""


def write_starter(root: Path, force: bool = False) -> Path:
    path = root / INSTRUCTIONS_FILE
    if os.path.lexists(path) and not force:
        raise UsageError(f"{path} already exists; clovercode init leaves it as it is",
                         hint="Edit it by hand, or pass --force to replace it with a fresh starter.")
    try:  # a link in its place is replaced, never written through (AGENTS.md -> ~/.bashrc)
        ProjectView(root).write_bytes(INSTRUCTIONS_FILE, starter_text(root).encode("utf-8"), follow_last=False)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path

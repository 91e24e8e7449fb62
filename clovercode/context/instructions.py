"""Instruction files (``AGENTS.md``): the one at the project root and those in directories the task
touches (and the directories between), included verbatim in the system prompt."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from clovercode.trust.projectview import OutsideProject, ProjectView

INSTRUCTIONS_FILE = "AGENTS.md"
MAX_INSTRUCTION_BYTES = 256 * 1024  # a file larger than this is not instructions; it is left out with a note


@dataclass(frozen=True)
class InstructionFile:
    rel: str  # "AGENTS.md", "src/api/AGENTS.md"
    text: str
    refused: bool = False  # it leads outside the project (a symlink): ``text`` is only a note


def outside_note(rel: str) -> str:
    return f"{rel} leads outside the project (a symlink), so clovercode did not read it"


def instruction_dirs(root: Path, touched: Iterable[str]) -> list[str]:
    """Project-relative directories whose AGENTS.md apply: the root, then every directory on the way
    to each touched path (a file's directory, or a directory itself), outermost first."""
    found: dict[str, None] = {"": None}
    for rel in touched:
        if Path(rel).is_absolute():
            try:
                rel = Path(rel).resolve().relative_to(root.resolve()).as_posix()
            except (ValueError, OSError):
                continue
        rel = rel.strip().strip("/")
        if not rel or rel == "." or rel.startswith(".."):
            continue
        parts = rel.split("/")
        try:
            is_dir = ProjectView(root).kind(rel) == "dir"
        except OSError:  # a model's path argument can be anything, e.g. longer than the OS allows
            continue
        if not is_dir:
            parts = parts[:-1]
        for depth in range(1, len(parts) + 1):
            found.setdefault("/".join(parts[:depth]), None)
    return sorted(found, key=lambda d: (d.count("/") + (d != ""), d))


def read_instructions(root: Path, touched: Iterable[str] = ()) -> list[InstructionFile]:
    """The AGENTS.md files that apply, root first; unreadable ones are skipped, oversized ones and
    those that resolve outside the project (a symlink to ~/.ssh/id_rsa) noted, never read."""
    out = []
    view = ProjectView(root)
    for directory in instruction_dirs(root, touched):
        rel = f"{directory}/{INSTRUCTIONS_FILE}" if directory else INSTRUCTIONS_FILE
        try:
            kind = view.kind(rel)
            if kind is None:
                if view.find(rel) is None and os.path.lexists(root / rel):
                    out.append(InstructionFile(rel, f"[{outside_note(rel)}]", refused=True))
                continue
            if kind != "file":
                continue
            if view.stat(rel).st_size > MAX_INSTRUCTION_BYTES:
                out.append(InstructionFile(rel, f"[{rel} is larger than {MAX_INSTRUCTION_BYTES // 1024} KiB "
                                                "and was not included]"))
                continue
            text = view.read_bytes(rel, MAX_INSTRUCTION_BYTES).decode("utf-8", errors="replace")
        except OutsideProject:
            out.append(InstructionFile(rel, f"[{outside_note(rel)}]", refused=True))
            continue
        except OSError:
            continue
        out.append(InstructionFile(rel, text))
    return out


def render_instructions(files: list[InstructionFile]) -> str:
    if not files:
        return ""
    parts = ["# Project instructions",
             "These files are written by the project's maintainers. Follow them; a file in a deeper "
             "directory refines the ones above it for the code in that directory."]
    for item in files:
        parts.append(f"## {item.rel}\n{item.text.rstrip()}")
    return "\n\n".join(parts)

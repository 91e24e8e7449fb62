"""Custom slash commands: Markdown prompt files in ``.clovercode/commands/`` (the project's) and in
``commands/`` next to the user's config file. ``/NAME ARGS`` sends the file's text as a task, with
``$ARGUMENTS`` replaced by ARGS (appended when the file has no ``$ARGUMENTS``). An optional
front matter line ``description: …`` is what /help shows. Built-in commands cannot be shadowed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from clovercode.ground.config import user_config_path
from clovercode.trust.projectview import OutsideProject, ProjectView

PROJECT_DIR = Path(".clovercode") / "commands"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class CustomCommand:
    name: str
    path: Path
    source: str  # "project" | "user"
    description: str
    template: str

    def task(self, arguments: str) -> str:
        if "$ARGUMENTS" in self.template:
            return self.template.replace("$ARGUMENTS", arguments)
        return self.template + (f"\n\n{arguments}" if arguments else "")


def parse(path: Path, source: str, name: str | None = None, text: str | None = None) -> CustomCommand | None:
    """The command in file ``path`` (or its ``text``, already read), named ``name`` (default: the
    file's stem), or None if unusable."""
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
    description = ""
    if text.startswith("---\n") and "\n---" in text[4:]:
        head, _, text = text[4:].partition("\n---")
        text = text.lstrip("-").lstrip("\n")
        for line in head.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "description":
                description = value.strip().strip("\"'")
    body = text.strip()
    if not body:
        return None
    return CustomCommand(name or path.stem, path, source, description or body.splitlines()[0][:70], body)


def load_custom_commands(root: Path, env: Mapping[str, str], builtin: set[str],
                         notes: list[str] | None = None) -> dict[str, CustomCommand]:
    """The user's commands, then the project's (a project command replaces a user one of the same name).

    A project command file that resolves outside the project (``x.md -> ~/.ssh/id_rsa``, or a
    symlinked ``.clovercode/commands``) is not read: a note for the person goes to ``notes``."""
    found: dict[str, CustomCommand] = {}
    directory = user_config_path(env).parent / "commands"
    if directory.is_dir():  # the user's own files: wherever they lead is the user's choice
        for path in sorted(directory.glob("*.md")):
            if NAME.match(path.stem) and path.stem not in builtin and (command := parse(path, "user")) is not None:
                found[command.name] = command
    view = ProjectView(root)  # the project's files are read beneath its root, never through a link out
    try:
        entries = view.listdir(PROJECT_DIR, outside=True) if view.kind(PROJECT_DIR) == "dir" else []
        if view.find(PROJECT_DIR) is None:
            raise OutsideProject(str(PROJECT_DIR))
    except OutsideProject:
        entries = []  # not even listed: the names in another directory are not the project's business
        if notes is not None:
            notes.append(f"custom commands: {PROJECT_DIR.as_posix()} leads outside the project (a symlink), "
                         "so clovercode did not read it")
    for name, kind in entries:
        stem = name[:-3]
        if not name.endswith(".md") or not NAME.match(stem) or stem in builtin:
            continue
        if kind == "outside":
            if notes is not None:
                notes.append(f"custom command /{stem}: {PROJECT_DIR.as_posix()}/{name} leads "
                             "outside the project (a symlink), so clovercode did not read it")
            continue
        try:
            text = view.read_bytes(PROJECT_DIR / name).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        command = parse(root / PROJECT_DIR / name, "project", stem, text)
        if command is not None:
            found[command.name] = command
    return found

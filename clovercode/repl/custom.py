"""Custom slash commands: Markdown prompt files in ``.clovercode/commands/`` (the project's) and in
``commands/`` next to the user's config file. ``/NAME ARGS`` sends the file's text as a task, with
``$ARGUMENTS`` replaced by ARGS (appended when the file has no ``$ARGUMENTS``). An optional
front matter line ``description: …`` is what /help shows. Built-in commands cannot be shadowed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from clovercode.config import user_config_path

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


def parse(path: Path, source: str) -> CustomCommand | None:
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
    return CustomCommand(path.stem, path, source, description or body.splitlines()[0][:70], body)


def load_custom_commands(root: Path, env: Mapping[str, str], builtin: set[str]) -> dict[str, CustomCommand]:
    """The user's commands, then the project's (a project command replaces a user one of the same name)."""
    found: dict[str, CustomCommand] = {}
    for directory, source in ((user_config_path(env).parent / "commands", "user"), (root / PROJECT_DIR, "project")):
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.md")):
            if not NAME.match(path.stem) or path.stem in builtin:
                continue
            command = parse(path, source)
            if command is not None:
                found[command.name] = command
    return found

"""Tab completion in the REPL: ``/`` commands at the start of the line, ``@`` project files
anywhere (git's view of the project: .gitignore is respected)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

MAX_FILE_COMPLETIONS = 50
FILES_TTL = 5.0  # seconds a listing is reused while typing


class FileLister:
    def __init__(self, root: Path, clock: Callable[[], float] = time.monotonic):
        self.root, self.clock = root, clock
        self.cached: list[str] = []
        self.at = float("-inf")

    def __call__(self) -> list[str]:
        if self.clock() - self.at > FILES_TTL:
            from clovercode.actions.listing import project_files

            prefix = len(str(self.root)) + 1
            self.cached = sorted(str(p)[prefix:].replace(os.sep, "/") for p in project_files(self.root))
            self.at = self.clock()
        return self.cached


def file_matches(files: Iterable[str], typed: str) -> list[str]:
    """Paths starting with ``typed`` first, then those whose file name or path contains it."""
    lowered = typed.lower()
    starts = [f for f in files if f.lower().startswith(lowered)]
    contains = [f for f in files if lowered in f.lower() and f not in starts]
    return (starts + contains)[:MAX_FILE_COMPLETIONS]


class ReplCompleter(Completer):
    def __init__(self, commands: Callable[[], Iterable[str]], files: Callable[[], list[str]]):
        self.commands, self.files = commands, files

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
        before = document.text_before_cursor
        if before.startswith("/") and " " not in before:
            for name in sorted(self.commands()):
                if name.startswith(before[1:]):
                    yield Completion("/" + name, start_position=-len(before))
            return
        word = before.split()[-1] if before and not before[-1].isspace() else ""
        if word.startswith("@"):
            for path in file_matches(self.files(), word[1:]):
                yield Completion("@" + path, start_position=-len(word), display=path)

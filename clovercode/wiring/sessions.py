"""Saved sessions of a project: `clovercode sessions`, the `--resume` picker, the last exchanges
shown on resuming. A session is one REPL (or exec) conversation; each of its tasks wrote a
trajectory whose ``conversation`` snapshot carries the session id, and the newest holds it all."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clovercode.ground.messages import Message
from clovercode.context.resume import SEARCH_LIMIT, SavedSession, load_saved, saved_paths
from clovercode.ground.errors import UsageError
from clovercode.trust.terminal import inert

PICKER_ROWS = 10
EXCHANGES_SHOWN = 3


@dataclass
class SessionInfo:
    id: str
    saved: SavedSession  # its newest trajectory: the whole conversation
    modified: float

    @property
    def first_task(self) -> str:
        goals = [m.content for m in self.saved.messages if "goal" in m.tags]
        return goals[0].split("\n")[0] if goals else ""

    @property
    def steps(self) -> int:
        return sum(1 for m in self.saved.messages if m.role == "assistant")

    @property
    def date(self) -> str:
        return datetime.datetime.fromtimestamp(self.modified).strftime("%Y-%m-%d %H:%M")


def list_sessions(directory: Path, root: Path | None) -> list[SessionInfo]:
    """Sessions of project ``root`` (all projects when None), newest first."""
    paths = sorted(saved_paths(directory), key=_mtime, reverse=True)[:SEARCH_LIMIT]
    found: dict[str, SessionInfo] = {}
    for path in paths:
        try:
            saved = load_saved(path)
        except UsageError:
            continue
        if not saved.messages or (root is not None and saved.root != str(root)):
            continue
        found.setdefault(saved.session_id, SessionInfo(saved.session_id, saved, _mtime(path)))
    return list(found.values())


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def newest_of_session(directory: Path, saved: SavedSession) -> SavedSession:
    """The newest trajectory of the session ``saved`` belongs to (an older one lacks later tasks)."""
    for info in list_sessions(directory, None):
        if info.id == saved.session_id:
            return info.saved
    return saved


def check_project(saved: SavedSession, root: Path, any_project: bool) -> None:
    if saved.root and saved.root != str(root) and not any_project:
        raise UsageError(f"session {saved.session_id} belongs to another project ({saved.root})",
                         hint=f"Run clovercode in that directory to continue it, or add --any-project to continue it "
                         f"in {root} anyway.")


def print_sessions(console: Console, sessions: list[SessionInfo], numbered: bool = False) -> None:
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    if numbered:
        table.add_column("#", justify="right")
    for name in ("id", "date", "steps", "first task"):
        table.add_column(name, justify="right" if name == "steps" else "left", no_wrap=name != "first task")
    for number, info in enumerate(sessions, 1):
        row = [info.id, info.date, str(info.steps), escape(info.first_task)]
        table.add_row(*([str(number)] if numbered else []), *row)
    console.print(table)


def pick_session(console: Console, sessions: list[SessionInfo], read_line: Callable[[str], "str | None"]) -> SessionInfo | None:
    """Ask which session to resume; None when the person declines (Esc, Ctrl-D)."""
    shown = sessions[:PICKER_ROWS]
    console.print("Sessions of this project, newest first:", highlight=False)
    print_sessions(console, shown, numbered=True)
    while True:
        line = read_line(f"Resume which? [1-{len(shown)}, Enter: 1, Esc: none]: ")
        if line is None:
            return None
        choice = line.strip() or "1"
        if choice.isdigit() and 1 <= int(choice) <= len(shown):
            return shown[int(choice) - 1]
        console.print(f"Type a number from 1 to {len(shown)}.", highlight=False)


def show_last_exchanges(console: Console, messages: list[Message], count: int = EXCHANGES_SHOWN) -> None:
    """The last few tasks and answers, so a resumed conversation is not a blank screen."""
    starts = [i for i, m in enumerate(messages) if m.role == "user" and "goal" in m.tags]
    for start in starts[-count:]:
        console.print(f"[bold]› {escape(inert(messages[start].content.split(chr(10))[0]))}[/]", highlight=False,
                      soft_wrap=True)
        following = messages[start + 1:]
        end = next((i for i, m in enumerate(following) if m.role == "user" and "goal" in m.tags),
                   len(following))
        answers = [m.content.strip() for m in following[:end] if m.role == "assistant" and m.content.strip()]
        calls = sum(len(m.tool_calls) for m in following[:end])
        if calls:
            console.print(f"  [dim]{calls} tool call{'s' if calls != 1 else ''}[/]", highlight=False)
        if answers:
            lines = answers[-1].splitlines()
            console.print(f"  {escape(inert(lines[0]))}" + (f" [dim](+{len(lines) - 1} lines)[/]" if len(lines) > 1 else ""),
                          highlight=False, soft_wrap=True)

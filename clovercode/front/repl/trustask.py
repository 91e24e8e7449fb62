""""Trust this folder?": asked once when the REPL starts in an untrusted project whose
``clovercode.toml`` would do more if trusted (settings held back, MCP servers, hooks). A yes is kept in
the user config's ``trusted_projects`` (edited with tomlkit, the rest of the file as it was); a no
holds for this session, and the question comes again next time. Nothing is asked off a terminal, or
in a project whose file asks for nothing that trust would give (docs/security.md, "Trust: projects
and their settings")."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.markup import escape

from clovercode.ground.config import PROJECT_FILE, Config
from clovercode.ground.errors import CloverError
from clovercode.front.repl.permissions import add_trusted_project
from clovercode.trust.project import UNTRUSTED
from clovercode.trust.terminal import inert

ReadLine = Callable[[str], "str | None"]


def held_back(cfg: Config) -> list[str]:
    """What the project's file asks for that only trust would give (setting keys, declarations)."""
    keys = [key for key, (_, why) in cfg.ignored.items() if why.why == UNTRUSTED]
    return keys + list(cfg.declared.untrusted)


def trust_on_start(root: Path, console: Console, load: Callable[[bool], Config],
                   read_line: ReadLine | None = None) -> Config:
    """The REPL's configuration: ``load(False)``, or ``load(True)`` (trusted) once the user trusts the project."""
    cfg = load(False)
    wanted = held_back(cfg)
    if cfg.project_trusted or not wanted:
        return cfg
    if read_line is None:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            return cfg  # piped: nobody to ask; the note at start says what was ignored
        from clovercode.ui.approval_prompt import tty_read_line

        def read_line(question: str) -> str | None:  # keys typed before the question never answer it
            return tty_read_line(question, fresh=True)
    listed = ", ".join(inert(w, newlines=False) for w in wanted)
    console.print(f"[bold yellow]{escape(str(root / PROJECT_FILE))} asks for more than an untrusted project gets:[/] "
                  f"{escape(listed)}", highlight=False, soft_wrap=not console.is_terminal)
    console.print("Trusting this folder lets its file set these, start its MCP servers and run its hooks (as you, "
                  "outside the sandbox). Trust only a project whose files you know. A project file never chooses "
                  "the model, approvals, tokens or where clovercode writes.", highlight=False,
                  soft_wrap=not console.is_terminal)  # at words on a terminal: its own wrap split "outsi|de"
    answer = read_line("Trust this folder? [y]es / [n]o: ")
    if (answer or "").strip().lower() not in ("y", "yes"):
        console.print("[dim]not trusted: its file's other settings stay ignored (asked again next time)[/]",
                      highlight=False)
        return cfg
    try:
        path = add_trusted_project(os.environ, root)
    except CloverError as exc:
        console.print(f"[yellow]trusted for this session only[/]: {escape(str(exc))}", highlight=False, soft_wrap=True)
    else:
        console.print(f"[dim]trusted {escape(str(root))} (kept in trusted_projects in {escape(str(path))})[/]",
                      highlight=False, soft_wrap=True)
    return load(True)

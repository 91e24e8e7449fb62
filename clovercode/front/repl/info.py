"""Bodies of /init, /diff, /status and /sessions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.syntax import Syntax

from clovercode.ground.errors import CloverError
from clovercode.trust import gitsafe
from clovercode.trust.terminal import inert

if TYPE_CHECKING:
    from clovercode.front.repl.app import Repl


def init_command(repl: "Repl", arg: str) -> bool:
    from clovercode.context.starter import write_starter

    try:
        path = write_starter(repl.root, force=arg.strip() == "--force")
    except CloverError as exc:
        repl.console.print(escape(str(exc)).replace("--force", "/init --force"), highlight=False, soft_wrap=True)
        return True
    repl.console.print(f"wrote {path}: fill in the <placeholders>; every task puts it in the system prompt",
                       highlight=False, markup=False)
    return True


def diff_command(repl: "Repl", _: str) -> bool:
    """What this session changed: from the checkpoint before its first change to the files now."""
    from clovercode.vcs.checkpoint import open_store

    console = repl.console
    if repl.first_snapshot is None:
        console.print("no changes in this session yet", highlight=False)
        return True
    try:
        store = open_store(repl.root, repl.session.env)
        text = store.diff_text(repl.first_snapshot) if hasattr(store, "diff_text") else None
    except (CloverError, OSError) as exc:
        console.print(f"[yellow]cannot compute the diff[/]: {escape(str(exc))}", highlight=False)
        text = None
    if text is None:
        files = ", ".join(sorted(repl.changed)) or "none recorded"
        console.print(f"changed in this session: {escape(inert(files))} (a full diff needs a git repository)",
                      highlight=False)
    elif not text.strip():
        console.print("the files are as they were before this session changed them (undone?)", highlight=False)
    else:
        console.print(Syntax(inert(text.rstrip("\n")), "diff", theme="ansi_dark", background_color="default"))
    return True


def status_command(repl: "Repl", _: str) -> bool:
    from clovercode.front.contextcmd import context_line

    session, console = repl.session, repl.console
    rows = [("model", session.backend.name), ("project", str(repl.root))]
    branch = gitsafe.run(repl.root, "branch", "--show-current", capture_output=True, text=True).stdout.strip()
    if branch:
        rows.append(("branch", branch))
    rules = len(repl.approver.rules)
    rows += [("sandbox", repl.cfg["sandbox"]),
             ("approval", f"{repl.approver.mode} · {rules} allow rule{'s' if rules != 1 else ''} (/permissions)"),
             ("session", session.session_id or "(not saved yet: no task has run)"),
             ("this session", f"{repl.tasks} task{'s' if repl.tasks != 1 else ''} · {repl.steps} steps · tokens "
                              f"{repl.prompt_tokens} in / {repl.completion_tokens} out"),
             ("limits", f"--max-steps {repl.cfg['max_steps']} · --max-time {repl.cfg['max_time']:g}s"),
             ("theme", f"{getattr(console, 'theme_name', 'dark')} ({getattr(console, 'theme_reason', 'the default')})")]
    line = context_line(session)
    if line:
        rows.append(("context", line.removeprefix("context ")))
    from clovercode.front.repl.mcpinfo import hooks_line, servers_line

    rows += [(label, value) for label, value in (("mcp", servers_line(repl)), ("hooks", hooks_line(repl))) if value]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        console.print(f"  [bold]{label.ljust(width)}[/]  {escape(value)}", highlight=False, soft_wrap=True)
    return True


def sessions_command(repl: "Repl", _: str) -> bool:
    from clovercode.wiring.session import trajectory_dir
    from clovercode.wiring.sessions import list_sessions, print_sessions

    found = list_sessions(trajectory_dir(repl.cfg, repl.session.env), repl.root)
    if not found:
        repl.console.print("no saved sessions for this project yet", highlight=False)
    else:
        print_sessions(repl.console, found[:20])
        repl.console.print("[dim]continue one with: clovercode --resume ID[/]", highlight=False)
    return True

"""``/fix [--attempts N] [--first] ISSUE``: ``clovercode fix`` from the REPL, on the REPL's model.

The same flow as the command (front/fixcmd.py): a fix branch, the tests before and after, one
commit, the verdict; with ``--attempts N`` the attempts run side by side, each drawn as a row of the
live region (its step, tokens as they stream, what it runs) that ends with its verdict, as the
subagents' rows do. Nothing is pushed: ``--push`` and ``--pr`` belong to the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from clovercode.ground.errors import UsageError
from clovercode.ground.settings import SETTINGS_BY_KEY

if TYPE_CHECKING:
    from clovercode.front.repl.app import Repl

USAGE = "/fix [--attempts N] [--first] ISSUE"
MAX_ATTEMPTS = int(SETTINGS_BY_KEY["fix.attempts"].maximum or 16)  # the setting's own bound, as `fix --attempts`


def parse_fix(arg: str) -> tuple[int | None, bool, str]:
    """(attempts, first, issue text). Only the flags named here are taken; any other leading ``--word``
    is refused rather than read as the start of the issue (a typo such as ``--atempts 3`` would
    otherwise send the model an issue that begins with it)."""
    words = arg.split()
    attempts: int | None = None
    first = False
    i = 0
    while i < len(words) and words[i].startswith("--"):
        flag, _, value = words[i].partition("=")
        if flag == "--first" and not value:
            first = True
        elif flag == "--attempts":
            if not value:
                i += 1
                value = words[i] if i < len(words) else ""
            if not value.isdigit() or not 1 <= int(value) <= MAX_ATTEMPTS:
                raise UsageError(f"--attempts takes a number from 1 to {MAX_ATTEMPTS}, got {value or 'nothing'!r}",
                                 hint="e.g. /fix --attempts 3 add() subtracts")
            attempts = int(value)
        else:
            raise UsageError(f"/fix does not know {words[i]!r}", hint=f"{USAGE} (--push and --pr: clovercode fix)")
        i += 1
    if first and (attempts or 0) < 2:
        raise UsageError("--first needs --attempts N (N of 2 or more)", hint="e.g. /fix --attempts 3 --first ISSUE")
    # the issue as typed, not re-joined: its own spacing and lines are the person's
    issue = arg
    for word in words[:i]:
        issue = issue.split(word, 1)[1]
    issue = issue.strip()
    if not issue:
        raise UsageError("/fix needs the issue to fix", hint=USAGE)
    return attempts, first, issue


def fix_command(repl: "Repl", arg: str) -> bool:
    """Raises CloverError (a bad flag, no git checkout for --attempts, a sandbox that stopped): the
    REPL says it and goes on (commands.py)."""
    from clovercode.fixflow.plan import FixRequest
    from clovercode.front.fixcmd import run_fix
    from clovercode.ui.render import ConsoleRenderer

    attempts, first, issue = parse_fix(arg)
    cfg = repl.cfg.with_overrides({"fix.attempts": attempts}, "/fix --attempts") if attempts else repl.cfg
    renderer = ConsoleRenderer(repl.console, screen=repl.screen)
    try:
        with repl.turn():
            outcome = run_fix(repl.root, cfg, FixRequest(issue_text=issue, first=first), repl.console,
                              repl.session.env, backend=repl.session.backend, sink=renderer)
    finally:
        repl.screen.suspend()
    repl.tasks += 1
    repl.steps += outcome.steps
    repl.prompt_tokens += outcome.prompt_tokens
    repl.completion_tokens += outcome.completion_tokens
    where = f" on branch {outcome.branch}" if outcome.branch else ""
    repl.console.print(f"[bold]/fix:[/] {escape(outcome.status)}{escape(where)} (exit code {int(outcome.exit_code)} "
                       "as `clovercode fix`)", highlight=False, soft_wrap=True)
    return True

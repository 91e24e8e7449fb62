"""The REPL's approval prompt: show the diff or the command, ask yes / no (and why) / always;
Ctrl-D or Esc cancels the run."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from typing import TYPE_CHECKING, Callable

from rich.console import Console

from clovercode.actions.approval import ALWAYS, CANCEL, NO, VIEW, Ask, Reply, parse_answer
from clovercode.actions.approval_view import render_approval
from clovercode.actions.context import ApprovalRequest
from clovercode.actions.permissions import command_rule, describe
from clovercode.trust.terminal import discard_pending_input, revealed
from clovercode.ui.approval_draw import draw_contents, draw_view

if TYPE_CHECKING:
    from clovercode.ui.render import Screen

# Shows a prompt, returns the answer, or None for Ctrl-D / Esc / end of input. ``fresh``: the answer must
# be typed after the prompt shows (keys typed ahead are discarded), as for every approval.
ReadLine = Callable[..., "str | None"]
# Shows a question, returns the key pressed among the given letters, or None for Esc / Ctrl-D (ui/onekey.py).
ReadKey = Callable[[str, str], "str | None"]
CANCEL_HINT = "Esc cancels the run"


def tty_read_line(prompt: str, fresh: bool = False) -> str | None:
    from prompt_toolkit import prompt as toolkit_prompt
    from prompt_toolkit.key_binding import KeyBindings

    if fresh:
        discard_typeahead()

    bindings = KeyBindings()

    @bindings.add("escape", eager=True)
    def _cancel(event) -> None:
        event.app.exit(result=None)

    try:
        return toolkit_prompt(prompt, key_bindings=bindings)
    except EOFError:
        return None


def tty_read_key(question: str, keys: str) -> str | None:
    """One key on the terminal, after dropping what prompt-toolkit read ahead (the terminal's own
    pending keys are dropped by read_key)."""
    from clovercode.ui.onekey import read_key

    import shutil
    import textwrap

    discard_typeahead()
    width = max(20, shutil.get_terminal_size().columns - 1)  # wrapped at words, not by the terminal mid-word
    wrapped = textwrap.fill(question, width, break_on_hyphens=False) + (" " if question.endswith(" ") else "")
    return read_key(wrapped, keys)


def discard_typeahead() -> None:
    """Keys typed before the question: those the terminal holds, and those prompt-toolkit read past
    the end of the last line it took (its typeahead buffer, which would feed the next prompt)."""
    from prompt_toolkit.input.defaults import create_input
    from prompt_toolkit.input.typeahead import clear_typeahead

    discard_pending_input()
    try:
        clear_typeahead(create_input())
    except (OSError, ValueError):  # stdin is not a terminal after all: nothing was read ahead
        pass


def plain_read_line(prompt: str, fresh: bool = False) -> str | None:
    """Piped input: the answers are the lines that follow, typed ahead by design."""
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = sys.stdin.readline()
    return None if line == "" else line.rstrip("\n")


def choose(read_line: ReadLine, read_key: "ReadKey | None", question: str, keys: str) -> str | None:
    """One answer among ``keys`` (letters): one key press on a terminal, else a line whose first
    letter or word is taken ("" for an empty line, "?" for one that answers nothing). None: cancelled."""
    if read_key is not None:
        return read_key(question, keys)
    line = read_line(question, fresh=True)
    if line is None:
        return None
    word = line.strip().lower()
    return word if word in ("yes", "no", "always", "view") else word[:1] if len(word) <= 1 else "?"


def make_ask(console: Console, read_line: ReadLine, screen: "Screen | None" = None, rules_file: str = "",
             read_key: "ReadKey | None" = None) -> Ask:
    """``read_key``: answer with one key, no Enter (the REPL on a terminal); else ``read_line``."""
    def ask(request: ApprovalRequest) -> Reply:
        with screen.asking() if screen is not None else nullcontext():
            reply = question_for(request)
        if screen is not None and request.kind == "edit" and reply.answer not in (NO, CANCEL) and request.detail:
            screen.approved_diffs.add(request.detail)  # the observation need not show it again
        return reply

    def question_for(request: ApprovalRequest) -> Reply:
        if screen is not None:
            screen.suspend()
        console.print()
        view = render_approval(request)
        draw_view(console, view)
        always, prefix = True, None
        more = " / [v]iew every line" if view.hidden else ""
        if request.kind == "edit":
            more = " / [v]iew the new file" if view.changes else more
        if view.escaped:
            more = (more or " / [v]iew") + " and the raw bytes"
        if request.kind == "edit":
            question = f"Apply this change? [y]es / [n]o / [a]lways for edits this session{more} · {CANCEL_HINT}: "
        elif request.kind == "mcp":
            question = f"Call it? [y]es / [n]o / [a]lways for this tool this session{more} · {CANCEL_HINT}: "
        else:
            prefix = command_rule(request.title)
            always = prefix is not None
            where = f" (a rule in {rules_file})" if rules_file else ""
            offer = f" / [a]lways allow {revealed(describe(prefix), newlines=False)}{where}" if prefix else ""
            question = f"Run it? [y]es / [n]o{offer}{more} · {CANCEL_HINT}: "
        keys = "yna" + ("v" if more else "")  # "a" on a compound command is told why it cannot be
        while True:
            key = choose(read_line, read_key, question, keys)
            if key is None:
                console.print("[yellow]cancelled[/]", highlight=False)
                return Reply(CANCEL)
            answer = parse_answer(key)
            if answer == VIEW:
                if request.kind == "edit" and view.changes:
                    draw_contents(console, view)
                else:
                    draw_view(console, view, everything=True)
                if view.escaped:  # what the escapes stand for, byte by byte
                    console.print("The lines that hold escapes, as UTF-8 bytes:", style="yellow", highlight=False)
                    for row in view.raw_hex():
                        console.print(row, highlight=False, markup=False)
                continue
            if answer == ALWAYS and not always:
                console.print("No rule can cover a compound command (;, &&, pipes, redirections): answer y or n.",
                              highlight=False)
                continue
            if answer == NO:
                # after a single key, an Enter typed out of habit must not send an empty reason
                reason = read_line("Tell the model why, or what to do instead (Enter: just no): ", fresh=read_key is not None)
                if reason is None:
                    console.print("[yellow]cancelled[/]", highlight=False)
                    return Reply(CANCEL)
                return Reply(NO, reason.strip())
            if answer is not None:
                return Reply(answer)
            console.print("Please answer y, n or a." if always else "Please answer y or n.", highlight=False)

    return ask

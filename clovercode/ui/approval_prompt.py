"""The REPL's approval prompt: show the diff or the command, ask yes / no (and why) / always;
Ctrl-D or Esc cancels the run."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from typing import TYPE_CHECKING, Callable

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax

from clovercode.actions.approval import ALWAYS, CANCEL, NO, Ask, Reply, parse_answer
from clovercode.actions.context import ApprovalRequest
from clovercode.actions.permissions import command_prefix
from clovercode.trust.terminal import discard_pending_input, inert

if TYPE_CHECKING:
    from clovercode.ui.render import Screen

# Shows a prompt, returns the answer, or None for Ctrl-D / Esc / end of input. ``fresh``: the answer must
# be typed after the prompt shows (keys typed ahead are discarded), as for every approval.
ReadLine = Callable[..., "str | None"]
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


def make_ask(console: Console, read_line: ReadLine, screen: "Screen | None" = None, rules_file: str = "") -> Ask:
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
        always = True
        if request.kind == "edit":
            console.print(f"[bold yellow]clovercode wants to {escape(inert(request.title, newlines=False))}[/]",
                          highlight=False)
            if request.detail:
                console.print(Syntax(inert(request.detail), "diff", theme="ansi_dark", background_color="default"))
            question = f"Apply this change? [y]es / [n]o / [a]lways for edits this session · {CANCEL_HINT}: "
        elif request.kind == "mcp":
            server, _, tool = request.title.partition(": ")
            tool, server = (escape(inert(name, newlines=False)) for name in (tool, server))
            console.print(f"[bold yellow]clovercode wants to call the MCP tool[/] [bold]{tool}[/] "
                          f"[bold yellow]of the server[/] [bold]{server}[/] [dim](outside the sandbox)[/]", highlight=False)
            console.print(inert(request.detail), highlight=False, markup=False, soft_wrap=True)
            question = f"Call it? [y]es / [n]o / [a]lways for this tool this session · {CANCEL_HINT}: "
        else:
            console.print(f"[bold yellow]clovercode wants to run a command[/] [dim]({escape(inert(request.detail))})[/]",
                          highlight=False)
            console.print(f"  [bold]$ {escape(inert(request.title))}[/]", highlight=False, soft_wrap=True)
            lines = request.title.count("\n") + 1
            if lines > 1:  # blank lines must not push the command's start off the screen unseen
                console.print(f"[yellow]  ↑ one command of {lines} lines[/]", highlight=False)
            prefix = command_prefix(request.title)
            always = prefix is not None
            where = f" (a rule in {rules_file})" if rules_file else ""
            offer = f" / [a]lways allow `{inert(prefix, newlines=False)} …`{where}" if prefix else ""
            question = f"Run it? [y]es / [n]o{offer} · {CANCEL_HINT}: "
        while True:
            line = read_line(question, fresh=True)
            if line is None:
                console.print("[yellow]cancelled[/]", highlight=False)
                return Reply(CANCEL)
            answer = parse_answer(line)
            if answer == ALWAYS and not always:
                console.print("No rule can cover a compound command (;, &&, pipes, redirections): answer y or n.",
                              highlight=False)
                continue
            if answer == NO:
                reason = read_line("Tell the model why, or what to do instead (Enter: just no): ")
                if reason is None:
                    console.print("[yellow]cancelled[/]", highlight=False)
                    return Reply(CANCEL)
                return Reply(NO, reason.strip())
            if answer is not None:
                return Reply(answer)
            console.print("Please answer y, n or a." if always else "Please answer y or n.", highlight=False)

    return ask

"""The REPL's approval prompt: show the diff or the command, ask yes / no / always."""

from __future__ import annotations

import sys
from typing import Callable

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax

from clovercode.actions.approval import NO, Ask, parse_answer
from clovercode.actions.context import ApprovalRequest

ReadLine = Callable[[str], "str | None"]  # shows a prompt, returns the answer or None at end of input


def tty_read_line(prompt: str) -> str | None:
    from prompt_toolkit import prompt as toolkit_prompt

    try:
        return toolkit_prompt(prompt)
    except EOFError:
        return None


def plain_read_line(prompt: str) -> str | None:
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = sys.stdin.readline()
    return None if line == "" else line.rstrip("\n")


def make_ask(console: Console, read_line: ReadLine) -> Ask:
    def ask(request: ApprovalRequest) -> str:
        console.print()
        if request.kind == "edit":
            console.print(f"[bold yellow]clovercode wants to {escape(request.title)}[/]", highlight=False)
            if request.detail:
                console.print(Syntax(request.detail, "diff", theme="ansi_dark", background_color="default"))
            question = "Apply this change? [y]es / [n]o / [a]lways for edits this session: "
        elif request.kind == "mcp":
            server, _, tool = request.title.partition(": ")
            console.print(f"[bold yellow]clovercode wants to call the MCP tool[/] [bold]{escape(tool)}[/] "
                          f"[bold yellow]of the server[/] [bold]{escape(server)}[/] [dim](outside the sandbox)[/]",
                          highlight=False)
            console.print(escape(request.detail), highlight=False, soft_wrap=True)
            question = "Call it? [y]es / [n]o / [a]lways for this tool this session: "
        else:
            console.print(f"[bold yellow]clovercode wants to run a command[/] [dim]({escape(request.detail)})[/]",
                          highlight=False)
            console.print(f"  [bold]$ {escape(request.title)}[/]", highlight=False, soft_wrap=True)
            question = "Run it? [y]es / [n]o / [a]lways for commands this session: "
        while True:
            line = read_line(question)
            if line is None:
                return NO  # end of input: nobody said yes
            answer = parse_answer(line)
            if answer is not None:
                return answer
            console.print("Please answer y, n or a.", highlight=False)

    return ask

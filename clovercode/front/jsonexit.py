"""The one JSON answer of ``fix --json`` / ``exec --json`` for exits their own code never sees: a
signal while the CLI still loads or parses its flags, a bad flag value. Standard library only, so
``python -m clovercode`` can use it before anything slow is imported (docs/ci.md, "Signals")."""

from __future__ import annotations

import json
import sys
from typing import NoReturn, Sequence

from clovercode.ground.termination import CTRL_C_EXIT, ENDING, answering, interrupt_detail

JSON_COMMANDS = ("fix", "exec")


def json_command(argv: Sequence[str]) -> str | None:
    """'fix' or 'exec' when the command line asks that command for ``--json``; None otherwise."""
    args = list(argv[: list(argv).index("--")] if "--" in argv else argv)
    command = next((arg for arg in args if not arg.startswith("-")), None)
    return command if command in JSON_COMMANDS and "--json" in args else None


def print_json_error(argv: Sequence[str], status: str, exit_code: int, message: str) -> bool:
    """Write the error in the shape the command's JSON output has; False when no JSON was asked for."""
    command = json_command(argv)
    if command is None:
        return False
    if ENDING.answered is not None:  # the run's one answer is out already: a second would break the contract
        return True
    if command == "exec":  # JSON Lines events: the stream still starts with run_started and ends with run_completed
        from clovercode.ui.jsonevents import exec_failure  # standard library only, like this module

        exec_failure(sys.stdout, message, exit_code, interrupted=status == "interrupted")
        return True
    answer = {"status": status, "exit_code": exit_code, "error": message}
    with answering(exit_code):
        sys.stdout.write(json.dumps(answer) + "\n")  # ASCII: any locale
        sys.stdout.flush()
    return True


def print_interrupted(exc: BaseException, argv: Sequence[str] | None = None) -> int:
    """JSON for an interrupt (Ctrl-C, SIGTERM, SIGHUP) outside the command's own handling; its exit code."""
    code = int(getattr(exc, "exit_code", CTRL_C_EXIT))
    print_json_error(sys.argv[1:] if argv is None else argv, "interrupted", code, interrupt_detail(exc))
    return code


def exit_interrupted_early(exc: BaseException) -> NoReturn:
    """A signal while the CLI loads: the JSON object (if asked for), a line on stderr, 128 + the signal."""
    code = print_interrupted(exc)
    sys.stderr.write(interrupt_detail(exc).removesuffix(" by the user (Ctrl-C)") + "\n")
    sys.stderr.flush()
    raise SystemExit(code)


def silent_interrupt(exc: SystemExit) -> KeyboardInterrupt | None:
    """The interrupt behind an exit that typer made silently: it turns a KeyboardInterrupt raised
    while it parses the command line (outside every handler of ours) into ``Exit(130)``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current.__cause__, KeyboardInterrupt):
            return current.__cause__
        current = current.__context__
    return None

"""``clovercode acp`` reads (and answers) the editor's first line before typer and the SDK have loaded.

``__main__`` calls ``start`` before it loads the CLI. When the arguments are plainly ones ``acp``
takes (``quick_flags``, an allowlist of its own options in their plain forms) and the configuration
they give loads without an error, the first-line reader (firstline.py) starts at once; the CLI then
loads, parses the same arguments as always and reaches ``command.run_acp``, which takes that reader
(``take``). Any other arguments (``--help``, a typo, an option twice, a value that looks like an
option) start nothing here: typer reports them as always, and ``run_acp`` starts the reader itself
once the arguments and the configuration are known good. Either way a bad flag or config is
refused before a byte of the protocol is read or written.

stdin is the process's, so the reader started here is the one state this module keeps.
"""

from __future__ import annotations

import importlib.util
import os
import re
import stat
from typing import Any, Sequence

from clovercode.front.acp.firstline import FirstLine
from clovercode.ground.config import load_config

# acp's options (front/cli.py's acp_command) that take a value: the name as typed -> its key in the flags
VALUE_OPTIONS = {"--model": "model", "-m": "model", "--sandbox": "sandbox", "--approval": "approval",
                 "--max-steps": "max_steps", "--max-time": "max_time", "--endpoint": "endpoint",
                 "--api-key": "api_key", "--endpoint-stream": "endpoint_stream"}
TRUST = "--trust-project"
# Numbers in the forms typer reads to the same value; "1e3", " 5", "+5", "inf" are typer's to parse.
_NUMBERS = {"max_steps": (re.compile(r"[0-9]{1,9}"), int), "max_time": (re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?"), float)}

_started: list[FirstLine] = []


def quick_flags(argv: Sequence[str]) -> tuple[dict[str, Any], bool] | None:
    """(the flags, --trust-project) that typer would give ``clovercode acp ARGV``, for plain arguments
    only; None for anything else (typer then parses them: tests/test_acp_handshake.py holds the two equal)."""
    flags: dict[str, Any] = dict.fromkeys(VALUE_OPTIONS.values())
    trust, seen, args = False, set(), list(argv)
    while args:
        arg = args.pop(0)
        if arg == TRUST and TRUST not in seen:
            trust = True
            seen.add(TRUST)
            continue
        name, equals, value = arg.partition("=")
        if not equals:
            if not args:
                return None
            value = args.pop(0)
        elif not name.startswith("--"):  # "-m=x": click would read "=x" as the value
            return None
        key = VALUE_OPTIONS.get(name)
        if key is None or key in seen or not value or value.startswith("-"):
            return None
        seen.add(key)
        if key in _NUMBERS:
            pattern, kind = _NUMBERS[key]
            if not pattern.fullmatch(value):
                return None
            flags[key] = kind(value)
        else:
            flags[key] = value
    return flags, trust


def stdio_problem() -> str | None:
    """Why stdin or stdout cannot carry the protocol, or None. asyncio's pipe streams take a pipe, a
    socket or a terminal; anything else (a regular file, a directory, a closed descriptor) is named,
    so ``clovercode acp > log.txt`` is a clear usage error, not a crash."""
    for fd, name in ((0, "standard input"), (1, "standard output")):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            return f"its {name} is closed"
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            kind = "a regular file" if stat.S_ISREG(mode) else "neither a pipe, a socket nor a terminal"
            return f"its {name} is {kind}"
    return None


def start(argv: Sequence[str]) -> None:
    """From ``__main__``, for ``clovercode acp ARGV``: start the first-line reader when ARGV is plain
    and its configuration loads; otherwise do nothing (the CLI reports what is wrong, as always)."""
    parsed = quick_flags(argv)
    if parsed is None or _started or importlib.util.find_spec("acp") is None or stdio_problem() is not None:
        return
    try:
        load_config(None, os.environ, parsed[0], parsed[1])
        _started.append(FirstLine())
    except Exception:  # noqa: BLE001 - a config error (or worse) is the CLI's to report, as it always did
        return


def take() -> FirstLine:
    """The reader ``start`` began, else one started now (``run_acp`` calls this once the flags are good)."""
    return _started.pop() if _started else FirstLine()

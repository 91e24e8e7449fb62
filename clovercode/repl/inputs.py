"""Where REPL input comes from: prompt-toolkit on a terminal (history, Esc Enter for a newline,
Tab completion of @paths and /commands), plain lines otherwise."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterable, Iterator

from clovercode.config import Config, state_dir
from clovercode.errors import ConfigError
from clovercode.termination import Terminated

PROMPT = "clover> "


def history_path(cfg: Config) -> Path:
    """The REPL's input history file, checked writable (prompt-toolkit appends to it after every line)."""
    path = Path(cfg["history_file"]).expanduser() if cfg["history_file"] else state_dir(os.environ) / "history"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.open("a", encoding="utf-8").close()
    except OSError as exc:
        raise ConfigError(f"cannot write the REPL history {path}: {exc.strerror or exc}",
                          hint="Set history_file (CLOVERCODE_HISTORY_FILE) to a writable file.") from None
    return path


def tty_lines(cfg: Config, completer: object = None) -> Iterator[str]:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings

    bindings = KeyBindings()

    @bindings.add("escape", "enter")
    def _newline(event) -> None:  # Alt-Enter / Esc Enter: a newline instead of submitting
        event.current_buffer.insert_text("\n")

    prompt = PromptSession(history=FileHistory(str(history_path(cfg))), key_bindings=bindings, multiline=False,
                           completer=completer, complete_while_typing=False)
    while True:
        try:
            yield prompt.prompt(PROMPT)
        except Terminated:
            raise
        except KeyboardInterrupt:  # Ctrl-C at the prompt clears the line, it does not exit
            continue
        except EOFError:
            return


def plain_lines(stream: Iterable[str] | None = None) -> Iterator[str]:
    for line in stream if stream is not None else sys.stdin:
        yield line.rstrip("\n")

"""Where REPL input comes from: prompt-toolkit on a terminal (history, Esc Enter for a newline,
Tab completion of @paths and /commands), plain lines otherwise."""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from clovercode.ground.config import Config, state_dir
from clovercode.ground.errors import ConfigError
from clovercode.ground.privatefiles import open_private, private_dir
from clovercode.ground.termination import CAUGHT, Terminated, on_first_signal

PROMPT = "clover> "


class EmptyInterrupt(KeyboardInterrupt):
    """Ctrl-C at an empty prompt."""


def history_path(cfg: Config) -> Path:
    """The REPL's input history file, checked writable (prompt-toolkit appends to it after every line)."""
    path = Path(cfg["history_file"]).expanduser() if cfg["history_file"] else state_dir(os.environ) / "history"
    try:
        private_dir(path.parent, own=not cfg["history_file"])  # a chosen file's directory need not be ours
        open_private(path, "a").close()  # prompt-toolkit appends to it as it is
    except OSError as exc:
        raise ConfigError(f"cannot write the REPL history {path}: {exc.strerror or exc}",
                          hint="Set history_file (CLOVERCODE_HISTORY_FILE) to a writable file.") from None
    return path


# The mode label at the right of the prompt, in a colour chosen per theme (xterm 75 on black, 18 on
# white: both over 7:1); prompt-toolkit's default grey was 3.59:1 on white (issue 49).
MODE_COLOURS = {"dark": "#5fafff", "light": "#000087"}


def tty_lines(cfg: Config, completer: object = None, typed_ahead: Callable[[], str] = str,
              modes: Any = None, theme: str = "dark") -> Iterator[str]:
    """Lines from prompt-toolkit; each prompt starts with ``typed_ahead()``, what was typed while the
    last turn ran (editable, never sent without Enter). ``modes`` (repl/modes.Modes): Shift+Tab cycles
    the approval mode, shown at the right of the prompt line."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings

    bindings = KeyBindings()

    @bindings.add("escape", "enter")
    def _newline(event) -> None:  # Alt-Enter / Esc Enter: a newline instead of submitting
        event.current_buffer.insert_text("\n")

    @bindings.add("c-g")
    def _editor(event) -> None:  # Ctrl-G: write the prompt in $VISUAL / $EDITOR, as Claude Code and Codex do
        event.current_buffer.open_in_editor(validate_and_handle=False)

    @bindings.add("c-c")
    def _interrupt(event) -> None:  # a line is cleared; at an empty prompt, the way out is said (or taken)
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            event.app.exit(exception=EmptyInterrupt())

    if modes is not None:
        @bindings.add("s-tab")
        def _cycle(event) -> None:
            modes.cycle()
            event.app.invalidate()

    rprompt = (lambda: [("class:mode", modes.label())]) if modes is not None else None
    from prompt_toolkit.styles import Style as PromptStyle

    style = PromptStyle.from_dict({"mode": MODE_COLOURS.get(theme, MODE_COLOURS["dark"]), "rprompt": ""})
    prompt = PromptSession(history=FileHistory(str(history_path(cfg))), key_bindings=bindings, multiline=False,
                           completer=completer, complete_while_typing=False, rprompt=rprompt, style=style)
    warned = False  # Ctrl-C at an empty prompt said how to exit; a second one right after exits
    while True:
        try:
            with _signals_end_the_prompt(prompt.app):
                line = prompt.prompt(PROMPT, default=typed_ahead())
            warned = False
            yield line
        except Terminated:
            raise
        except EmptyInterrupt:
            if warned:
                return
            warned = True
            print("(Ctrl-C again or Ctrl-D exits)", flush=True)
        except KeyboardInterrupt:  # Ctrl-C at the prompt clears the line, it does not exit
            continue
        except EOFError:
            return


@contextmanager
def _signals_end_the_prompt(app: Any) -> Iterator[None]:
    """SIGTERM / SIGHUP while the prompt waits end it with :class:`Terminated`, raised by ``prompt()``.

    Raised straight from the signal handler, the exception would surface inside prompt-toolkit's
    event loop (say, while it reads the history file), which prints "Unhandled exception in event
    loop" and waits for Enter. Only where ``signals_as_interrupts`` is in force (a Python handler is
    installed); the first signal counts, as there."""
    if not all(callable(signal.getsignal(signum)) for signum in CAUGHT):
        yield
        return

    def end_prompt(signum: int) -> None:
        loop = getattr(app, "loop", None)
        if not app.is_running or loop is None:
            raise Terminated(signum)

        def end() -> None:
            if app.future is not None and not app.future.done():
                app.exit(exception=Terminated(signum))
        loop.call_soon_threadsafe(end)

    with on_first_signal(end_prompt) as fired:
        try:
            yield
        finally:
            if fired and not isinstance(sys.exc_info()[1], Terminated):  # the prompt ended before it could say so
                raise Terminated(fired[0])


def plain_lines(stream: Iterable[str] | None = None) -> Iterator[str]:
    for line in stream if stream is not None else sys.stdin:
        yield line.rstrip("\n")

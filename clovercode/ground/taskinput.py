"""The one rule for a task's text, wherever it comes from: the REPL, `fix` (text, file, GitHub), `exec`.

Two limits, applied the same way everywhere:
- **Size.** A task is at most ``MAX_TASK_CHARS`` characters; a longer one is refused with a clear
  error (the REPL stays open). A pasted log beyond that is more noise than signal for the model.
  Text nobody typed — a GitHub issue a bot is asked to fix — is cut there instead, with a note.
- **Window.** A task that does not fit the model's context window is cut in the middle, with a
  note in the text and a warning on screen (``fit_goal``, applied by the prompt builder, which
  knows the window); it is never squeezed silently.
An empty task — only blank space or Markdown marks such as a lone ``#`` — is refused.
"""

from __future__ import annotations

import re

from clovercode.ground.errors import UsageError

MAX_TASK_CHARS = 200_000
_MARKUP_ONLY_RE = re.compile(r"[\s#*_>`~=|+\-]*")
CUT_NOTE = "[… {omitted} characters of the task were cut here to fit the model's context window …]"


def is_blank(text: str) -> bool:
    """Only blank space or Markdown marks (``# ``, ``---``, ``> ``): nothing for the model to do."""
    return bool(_MARKUP_ONLY_RE.fullmatch(text))


def check_task(text: str, what: str = "the task") -> str:
    """``text`` if it is a usable task; UsageError (exit 2) when it is empty or over ``MAX_TASK_CHARS``."""
    if is_blank(text):
        raise UsageError(f"{what} is empty" + (" (only Markdown marks)" if text.strip() else ""),
                         hint="Describe the problem, e.g. \"mean() of [1, 2] is 1, expected 1.5\".")
    if len(text) > MAX_TASK_CHARS:
        raise UsageError(f"{what} is {len(text):,} characters; at most {MAX_TASK_CHARS:,} are accepted",
                         hint="Trim pasted logs to the part that shows the problem.")
    return text


def cut_to_limit(text: str, limit: int = MAX_TASK_CHARS) -> str:
    """Text nobody typed (a fetched issue) cut at the size limit, with a note where it was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n\n[… the rest ({len(text) - limit:,} characters) was cut: tasks are at most {limit:,} characters]"


def cut_middle(text: str, keep_chars: int) -> str:
    """``text`` with its middle replaced by the window note, keeping ``keep_chars`` characters of it."""
    if len(text) <= keep_chars:
        return text
    head = int(keep_chars * 0.7)  # the start of a task says what is wanted; the end often the error
    tail = keep_chars - head
    note = CUT_NOTE.format(omitted=f"{len(text) - head - tail:,}")
    return f"{text[:head]}\n{note}\n{text[len(text) - tail:]}"

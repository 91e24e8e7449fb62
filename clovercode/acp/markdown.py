"""Text an editor renders as Markdown, made to show as it is.

Command output, file contents and diffs are not Markdown: a removed line (``- x``) would become a
bullet and ``# x`` a heading. So they go in a code fence longer than any run of backticks inside
them (CommonMark: a fence closes only on at least as many backticks), which no text can close early.
"""

from __future__ import annotations

import re

BACKTICKS = re.compile(r"`{3,}")


def fenced(text: str, info: str = "") -> str:
    longest = max((len(run) for run in BACKTICKS.findall(text)), default=2)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{fence}{info}\n{body}{fence}"


def text_block(text: str) -> dict[str, object]:
    """A ToolCallContent of fenced text."""
    return {"type": "content", "content": {"type": "text", "text": fenced(text)}}

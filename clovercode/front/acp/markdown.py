"""Text an editor renders as Markdown, made to show as it is.

Command output, file contents and diffs are not Markdown: a removed line (``- x``) would become a
bullet and ``# x`` a heading. So they go in a code fence longer than any run of backticks inside
them (trust/markdown.py), which no text can close early.
"""

from __future__ import annotations

from clovercode.trust.markdown import code_fence as fenced

__all__ = ["fenced", "text_block"]


def text_block(text: str) -> dict[str, object]:
    """A ToolCallContent of fenced text."""
    return {"type": "content", "content": {"type": "text", "text": fenced(text)}}

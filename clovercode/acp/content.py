"""A prompt's content blocks → the task text the loop takes. Text is taken as typed; a resource the
editor embedded (a file or a selection, ``embeddedContext``) is attached with its URI, as the REPL
attaches an @file; a resource link is named so the model can open it with view_file. Images and
audio are not offered in ``initialize``; a client that sends them anyway is told so."""

from __future__ import annotations

from typing import Any

from clovercode.errors import UsageError


def prompt_text(blocks: list[Any]) -> str:
    parts: list[str] = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource_link":
            parts.append(f"(attached: {block.uri})")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            if text is None:
                raise UsageError(f"the attachment {resource.uri} is binary; clovercode takes text only")
            parts.append(f"<attached uri={resource.uri!r}>\n{text}\n</attached>")
        else:
            raise UsageError(f"clovercode cannot take {kind} content in a prompt (text and text resources only)")
    return "\n\n".join(part for part in parts if part)

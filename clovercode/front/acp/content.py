"""A prompt's content blocks → the task text the loop takes. Text is taken as typed; a resource the
editor embedded (a file or a selection, ``embeddedContext``) is attached with its URI, as the REPL
attaches an @file; a resource link to a file of the project becomes its project path, which the
file tools accept (checked inside the project: a link out of it is refused, not followed). Images
and audio are not offered in ``initialize``; a client that sends them anyway is told so."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from clovercode.ground.errors import UsageError
from clovercode.trust.paths import inside_project


def prompt_text(blocks: list[Any], root: Path) -> str:
    parts: list[str] = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource_link":
            parts.append(f"(attached: {linked(block.uri, root)})")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            if text is None:
                raise UsageError(f"the attachment {resource.uri} is binary; clovercode takes text only")
            parts.append(f"<attached uri={resource.uri!r}>\n{text}\n</attached>")
        else:
            raise UsageError(f"clovercode cannot take {kind} content in a prompt (text and text resources only)")
    return "\n\n".join(part for part in parts if part)


def linked(uri: str, root: Path) -> str:
    """A resource link as the model should name it: a project file as its path in the project."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return uri
    if parsed.netloc not in ("", "localhost") or "\x00" in uri:
        raise UsageError(f"the attachment {uri[:200]} is not a local file")
    path = inside_project(root, Path(unquote(parsed.path)))
    if path is None or not Path(unquote(parsed.path)).is_absolute():
        raise UsageError(f"the attachment {unquote(parsed.path)[:200]} is outside the project {root}",
                         hint="clovercode's tools open files inside the project only; paste what you need instead.")
    relative = path.relative_to(Path(inside_project(root, root) or root))
    return relative.as_posix() or "."

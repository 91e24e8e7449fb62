"""The approval renderer: one pending action turned into everything a person must see before
answering, as a neutral structure that each front end draws (the REPL with rich, exec's warnings as
text, ACP as text plus diff blocks). None of them decides on its own what to show or leave out.

What it guarantees, whatever the model wrote:
- every line of the command or the diff is in ``lines``, never cut: long lines are for the front
  end to wrap, and a preview that holds back lines says how many (``hidden``) so the rest is one
  key away; runs of blank lines are folded into one marked line saying how many;
- what a terminal would not show is made visible and marked: control and escape characters, bidi
  overrides and zero-width characters (``\\u202e``, :func:`clovercode.trust.terminal.inert`), tabs
  inside a line, and long runs of spaces inside a line (``[90 spaces]``), which could otherwise
  push a payload past the right edge or onto what looks like a line of its own;
- an edit carries each file's old and new text in full (``changes``), for a front end to page or
  to send as a diff block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from clovercode.actions.context import ApprovalRequest, FileChange
from clovercode.trust.terminal import inert

PREVIEW_LINES = 40  # lines shown before "N more lines"; the rest is a key away
SPACE_RUN = 8  # spaces in a row, past a line's indentation, that are shown as a count
BLANK_RUN = 3  # blank lines in a row that fold into one marked line
_SPACES = re.compile(f" {{{SPACE_RUN},}}")

Part = tuple[str, bool]  # (text, marked: made visible by the renderer, drawn so that it stands out)


@dataclass(frozen=True)
class ViewLine:
    kind: str  # "add" | "del" | "context" | "hunk" | "file" | "command" | "text"
    parts: tuple[Part, ...]

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.parts)


@dataclass(frozen=True)
class ApprovalView:
    kind: str  # the request's: "edit" | "command" | "mcp"
    heading: str  # what clovercode wants to do, one line, inert
    note: str  # where it runs: the sandbox, or outside it (MCP)
    title: str  # one line that never passes for the whole: a command's first line and how many follow
    lines: tuple[ViewLine, ...]  # every line
    warnings: tuple[str, ...]  # what the person should look at twice (invisible characters, a long command)
    changes: tuple[FileChange, ...] = ()  # an edit's files in full
    preview: int = PREVIEW_LINES

    @property
    def hidden(self) -> int:
        """Lines beyond the preview, behind a key."""
        return max(0, len(self.lines) - self.preview)

    def plain(self, *, everything: bool = True) -> str:
        """The view as plain text (exec's warnings, ACP's permission text): heading, note, lines, warnings."""
        shown = self.lines if everything or not self.hidden else self.lines[:self.preview]
        out = [self.heading + (f" ({self.note})" if self.note else "")]
        out += [_sign(line.kind) + line.text for line in shown]
        if not everything and self.hidden:
            out.append(f"… {self.hidden} more lines")
        out += [f"! {warning}" for warning in self.warnings]
        return "\n".join(out)


def render_approval(request: ApprovalRequest, preview: int = PREVIEW_LINES) -> ApprovalView:
    if request.kind == "edit":
        return _edit(request, preview)
    if request.kind == "mcp":
        return _mcp(request, preview)
    return _command(request, preview)


def visible(line: str, kind: str = "text") -> tuple[Part, ...]:
    """One line (no newline in it) with every hidden thing written out and marked."""
    body = line
    indent = len(body) - len(body.lstrip(" \t"))
    lead, rest = body[:indent].replace("\t", "    "), body[indent:]
    parts: list[Part] = [(lead, False)] if lead else []
    for match in re.finditer(f"\t| {{{SPACE_RUN},}}| +$|[^\t ]+| +", rest):
        piece = match.group()
        if piece == "\t":
            parts.append(("\\t", True))
        elif piece.startswith(" ") and (len(piece) >= SPACE_RUN or match.end() == len(rest)):
            parts.append((f"[{len(piece)} space{'' if len(piece) == 1 else 's'}]", True))  # long, or trailing
        else:
            parts += _inert_parts(piece)
    merged: list[Part] = []
    for text, marked in parts:
        if merged and not marked and not merged[-1][1]:
            merged[-1] = (merged[-1][0] + text, False)
        else:
            merged.append((text, marked))
    return tuple(merged) if merged else (("", False),)


def _inert_parts(text: str) -> list[Part]:
    shown = inert(text, newlines=False)
    if shown is text:
        return [(text, False)]
    parts: list[Part] = []
    for piece in re.split(r"(\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[rnbafv]))", shown):
        if piece:
            parts.append((piece, bool(re.fullmatch(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[rnbafv])", piece))))
    return parts


def _folded(raw_lines: list[str], kind: str) -> Iterator[ViewLine]:
    """The lines, each made visible, with runs of blank lines folded into one marked line."""
    at = 0
    while at < len(raw_lines):
        end = at
        while end < len(raw_lines) and not raw_lines[end].strip():
            end += 1
        if end - at >= BLANK_RUN:
            yield ViewLine(kind, ((f"[{end - at} blank lines]", True),))
            at = end
            continue
        yield ViewLine(kind, visible(raw_lines[at], kind))
        at += 1


def _marked(lines: tuple[ViewLine, ...]) -> tuple[str, ...]:
    texts = [text for line in lines for text, marked in line.parts if marked]
    warnings = []
    if any(t.startswith("\\") and not t.startswith("\\t") for t in texts):
        warnings.append("it holds characters a terminal would not show (control, zero-width or bidi): "
                        "they are written out as \\x.., \\u....")
    if any(t.endswith("spaces]") or t.endswith("space]") for t in texts):
        warnings.append("a line holds a long run of spaces (or trailing ones), shown as [N spaces]: "
                        "read what follows it")
    if any(t.endswith("blank lines]") for t in texts):
        warnings.append("blank lines in a row are folded, shown as [N blank lines]")
    return tuple(warnings)


def _command(request: ApprovalRequest, preview: int) -> ApprovalView:
    raw = request.title.split("\n")
    lines = tuple(_folded(raw, "command"))
    warnings = list(_marked(lines))
    title = inert(raw[0], newlines=False)
    if len(raw) > 1:
        warnings.insert(0, f"one command of {len(raw)} lines: every line runs")
        title += f" (+{len(raw) - 1} more line{'' if len(raw) == 2 else 's'})"
    return ApprovalView("command", "clovercode wants to run a command", inert(request.detail, newlines=False),
                        title, lines, tuple(warnings), preview=preview)


def _edit(request: ApprovalRequest, preview: int) -> ApprovalView:
    lines: list[ViewLine] = []
    for raw in request.detail.split("\n") if request.detail else []:
        if raw.startswith(("+++", "---")):
            lines.append(ViewLine("file", visible(raw)))
        elif raw.startswith("@@"):
            lines.append(ViewLine("hunk", visible(raw)))
        elif raw[:1] in ("+", "-", " "):
            kind = {"+": "add", "-": "del", " ": "context"}[raw[0]]
            lines.append(ViewLine(kind, visible(raw[1:])))
        else:
            lines.append(ViewLine("text", visible(raw)))
    view_lines = tuple(lines)
    title = inert(request.title, newlines=False)
    return ApprovalView("edit", f"clovercode wants to {title}", "", title, view_lines, _marked(view_lines),
                        request.changes, preview)


def _mcp(request: ApprovalRequest, preview: int) -> ApprovalView:
    server, _, tool = request.title.partition(": ")
    lines = tuple(_folded(request.detail.split("\n"), "text")) if request.detail else ()
    heading = f"clovercode wants to call the MCP tool {inert(tool, newlines=False)} of the server {inert(server, newlines=False)}"
    return ApprovalView("mcp", heading, "outside the sandbox", inert(request.title, newlines=False), lines,
                        _marked(lines), preview=preview)


def _sign(kind: str) -> str:
    return {"add": "+", "del": "-", "context": " ", "command": "$ "}.get(kind, "")

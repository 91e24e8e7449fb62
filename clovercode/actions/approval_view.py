"""The approval renderer: one pending action turned into everything a person must see before
answering, as a neutral structure that each front end draws (the REPL with rich, exec's warnings as
text, ACP as text plus diff blocks). None of them decides on its own what to show or leave out.

What it guarantees, whatever the model wrote:
- every line of the command or the diff is in ``lines``, never cut: long lines are for the front
  end to wrap, and a preview that holds back lines says how many (``hidden``) so the rest is one
  key away; runs of empty lines (nothing at all on them) are folded into one marked line saying how
  many, and a line that holds anything else (a space, ``\\x0c``, U+3000) is never folded;
- only an allowlist of characters shows as itself (:func:`clovercode.trust.terminal.reveal`:
  printable ASCII, and letters, marks, digits, punctuation and symbols that draw something);
  every other character (controls, escapes, bidi, zero-width, variation selectors, Hangul
  fillers, spaces other than U+0020, line separators) is written out as ``\\u{E0100}``, marked,
  and counted in a warning ("7 invisible characters"); a command's tabs are written out too, a
  diff's leading tabs are indentation; long runs of spaces inside a line (``[90 spaces]``), which
  could push a payload past the right edge, are counted;
- the lines are those split at ``\\n`` only, so no line ends at a character it does not show;
- an edit carries each file's old and new text in full (``changes``), for a front end to page or
  to send as a diff block, and :meth:`ApprovalView.raw_hex` gives the bytes of every line that
  holds an escape, for the ``v`` key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from clovercode.actions.context import ApprovalRequest, FileChange
from clovercode.trust.terminal import escaped_count, hex_dump, reveal, revealed

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
    source: str = ""  # the text the lines were made from (the command, the diff, the arguments)

    @property
    def escaped(self) -> int:
        """Characters written out as escapes (invisible or steering), over every line."""
        return sum(escaped_count(line.parts) for line in self.lines)

    def raw_hex(self) -> list[str]:
        """Each source line that holds an escape, numbered, with its UTF-8 bytes in hex."""
        out: list[str] = []
        for number, line in enumerate(self.source.split("\n"), 1):
            if escaped_count(reveal(line)):
                out.append(f"line {number}:")
                out += ["  " + row for row in hex_dump(line)]
        return out

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
    """One line (no newline in it) with every hidden thing written out and marked. A command's
    tabs are written out (``\\u{9}``); elsewhere (diffs, files) leading tabs are indentation."""
    body = line
    indent = 0 if kind == "command" else len(body) - len(body.lstrip(" \t"))
    lead, rest = body[:indent].replace("\t", "    "), body[indent:]
    parts: list[Part] = [(lead, False)] if lead else []
    for match in re.finditer(f" {{{SPACE_RUN},}}| +$|[^ ]+| +", rest):
        piece = match.group()
        if piece.startswith(" ") and (len(piece) >= SPACE_RUN or match.end() == len(rest)):
            parts.append((f"[{len(piece)} space{'' if len(piece) == 1 else 's'}]", True))  # long, or trailing
        else:
            parts += reveal(piece)
    merged: list[Part] = []
    for text, marked in parts:
        if merged and not marked and not merged[-1][1]:
            merged[-1] = (merged[-1][0] + text, False)
        else:
            merged.append((text, marked))
    return tuple(merged) if merged else (("", False),)


def _folded(raw_lines: list[str], kind: str) -> Iterator[ViewLine]:
    """The lines, each made visible, with runs of blank lines folded into one marked line."""
    at = 0
    while at < len(raw_lines):
        end = at
        while end < len(raw_lines) and raw_lines[end] == "":  # empty: a space or \x0c runs, and shows
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
    if hidden := sum(escaped_count(line.parts) for line in lines):
        warnings.append(f"{hidden} invisible character{'' if hidden == 1 else 's'} (control, format, variation "
                        "selector, filler or unusual space), written out as \\u{...}: read them before answering")
    if "\\u{9}" in texts:
        warnings.append("a tab is written out as \\u{9}")
    if any(t.endswith("spaces]") or t.endswith("space]") for t in texts):
        warnings.append("a line holds a long run of spaces (or trailing ones), shown as [N spaces]: "
                        "read what follows it")
    if any(t.endswith("blank lines]") for t in texts):
        warnings.append("empty lines in a row are folded, shown as [N blank lines]")
    return tuple(warnings)


def _command(request: ApprovalRequest, preview: int) -> ApprovalView:
    raw = request.title.split("\n")
    lines = tuple(_folded(raw, "command"))
    warnings = list(_marked(lines))
    title = revealed(raw[0], newlines=False)
    if len(raw) > 1:
        warnings.insert(0, f"one command of {len(raw)} lines: every line runs")
        title += f" (+{len(raw) - 1} more line{'' if len(raw) == 2 else 's'})"
    return ApprovalView("command", "clovercode wants to run a command", revealed(request.detail, newlines=False),
                        title, lines, tuple(warnings), preview=preview, source=request.title)


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
    title = revealed(request.title, newlines=False)
    return ApprovalView("edit", f"clovercode wants to {title}", "", title, view_lines, _marked(view_lines),
                        request.changes, preview, request.detail)


def _mcp(request: ApprovalRequest, preview: int) -> ApprovalView:
    server, _, tool = request.title.partition(": ")
    lines = tuple(_folded(request.detail.split("\n"), "text")) if request.detail else ()
    heading = (f"clovercode wants to call the MCP tool {revealed(tool, newlines=False)} "
               f"of the server {revealed(server, newlines=False)}")
    return ApprovalView("mcp", heading, "outside the sandbox", revealed(request.title, newlines=False), lines,
                        _marked(lines), preview=preview, source=request.detail)


def _sign(kind: str) -> str:
    return {"add": "+", "del": "-", "context": " ", "command": "$ "}.get(kind, "")

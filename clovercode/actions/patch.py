"""The ``*** Begin Patch`` format: parse it, and apply one file's hunks to its lines. Pure.

    *** Begin Patch
    *** Add File: path          (then every line starts with +)
    *** Delete File: path
    *** Update File: path
    *** Move to: new/path       (optional, right after Update File)
    @@ optional line to search for first, e.g. def mean(values):
     context line               (a space, then the line)
    -removed line
    +added line
    *** End of File             (optional: the hunk ends at the end of the file)
    *** End Patch
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clovercode.actions.context import ToolError
from clovercode.actions.matching import LAYERS, closest_lines, find_windows, number_lines

BEGIN, END = "*** Begin Patch", "*** End Patch"
ADD, DELETE, UPDATE, MOVE = "*** Add File: ", "*** Delete File: ", "*** Update File: ", "*** Move to: "
END_OF_FILE = "*** End of File"
FORMAT_HINT = ("The patch must look like:\n*** Begin Patch\n*** Update File: path/to/file.py\n@@ def some_function():\n"
               " context line\n-old line\n+new line\n*** End Patch")


class PatchError(ToolError):
    """The patch text is malformed, or does not fit the files; nothing was changed."""


@dataclass(frozen=True)
class Hunk:
    header: str  # the text after "@@" ("" when none)
    lines: tuple[tuple[str, str], ...]  # (" " | "-" | "+", text)
    end_of_file: bool = False

    @property
    def old(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "+"]

    @property
    def new(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "-"]


@dataclass(frozen=True)
class FileOp:
    kind: str  # "add" | "delete" | "update"
    path: str
    content: str = ""  # add
    move_to: str | None = None  # update
    hunks: tuple[Hunk, ...] = field(default_factory=tuple)  # update


def parse_patch(text: str) -> list[FileOp]:
    lines = _unwrap(text).split("\n")
    if not lines or lines[0].strip() != BEGIN:
        raise PatchError(f"The patch must start with '{BEGIN}'. {FORMAT_HINT}")
    ops: list[FileOp] = []
    i = 1
    while i < len(lines):
        line = lines[i]
        if line.strip() == END:
            if any(rest.strip() for rest in lines[i + 1:]):
                raise PatchError(f"patch line {i + 2}: text after '{END}'.")
            break
        if line.startswith(ADD):
            i, op = _parse_add(lines, i)
        elif line.startswith(DELETE):
            op, i = FileOp("delete", _path(line, DELETE, i)), i + 1
        elif line.startswith(UPDATE):
            i, op = _parse_update(lines, i)
        elif not line.strip():
            i += 1
            continue
        else:
            raise PatchError(f"patch line {i + 1}: expected '{ADD}', '{DELETE}', '{UPDATE}' or '{END}', got {line[:80]!r}. "
                             + FORMAT_HINT)
        ops.append(op)
    if not ops:
        raise PatchError("The patch changes no file. " + FORMAT_HINT)
    return ops


def apply_hunks(text: str, hunks: tuple[Hunk, ...], shown: str) -> str:
    """``text`` (with "\\n" line endings) after every hunk, in order; a PatchError if one does not fit."""
    lines = text.split("\n")
    final_newline = len(lines) > 1 and lines[-1] == ""
    if final_newline or text == "":
        lines.pop()
    cursor = 0
    for number, hunk in enumerate(hunks, 1):
        where = f"{shown}, hunk {number}"
        start = cursor
        if hunk.header:
            start = _find_header(lines, hunk.header, cursor, where) + 1
        old = hunk.old
        if not old:
            at = start if hunk.header else len(lines)
            lines[at:at] = hunk.new
            cursor = at + len(hunk.new)
            continue
        at = _locate(lines, old, start, hunk, where)
        segment, j = [], at
        for tag, line in hunk.lines:
            if tag == " ":
                segment.append(lines[j])  # keep the file's own version of a context line
            if tag != "+":
                j += 1
            if tag == "+":
                segment.append(line)
        lines[at:at + len(old)] = segment
        cursor = at + len(segment)
    return "\n".join(lines) + ("\n" if lines and (final_newline or text == "") else "")


def _locate(lines: list[str], old: list[str], start: int, hunk: Hunk, where: str) -> int:
    for name, norm in LAYERS:
        hits = find_windows(lines, old, norm, start)
        if hunk.end_of_file:
            hits = [h for h in hits if h + len(old) == len(lines)]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            numbers = ", ".join(str(h + 1) for h in hits)
            how = "" if name == "exact" else f" (ignoring {name})"
            raise PatchError(f"{where}: its context and removed lines match {len(hits)} places{how} at lines {numbers}; "
                             "add more context lines or an '@@ line' header so it matches once. Nothing was changed.")
    message = f"{where}: its context and removed lines were not found"
    if start:
        message += f" after line {start}"
    near = closest_lines(lines[start:], old)
    if near is not None:
        first, block, similarity = near
        message += (f". Closest lines ({similarity:.0%} similar):\n" + number_lines(block, first + start)
                    + "\nCopy context lines exactly from view_file")
    raise PatchError(message + ". Nothing was changed.")


def _find_header(lines: list[str], header: str, cursor: int, where: str) -> int:
    wanted = header.strip()
    for i in range(cursor, len(lines)):
        if lines[i].strip() == wanted:
            return i
    for i in range(cursor, len(lines)):
        if wanted in lines[i]:
            return i
    raise PatchError(f"{where}: the '@@ {wanted}' line was not found" + (f" after line {cursor}" if cursor else "")
                     + ". Nothing was changed.")


def _parse_add(lines: list[str], i: int) -> tuple[int, FileOp]:
    path = _path(lines[i], ADD, i)
    body, i = [], i + 1
    while i < len(lines) and not lines[i].startswith("*** "):
        if not lines[i].startswith("+"):
            raise PatchError(f"patch line {i + 1}: every line of an added file starts with '+', got {lines[i][:80]!r}.")
        body.append(lines[i][1:])
        i += 1
    return i, FileOp("add", path, "\n".join(body) + ("\n" if body else ""))


def _parse_update(lines: list[str], i: int) -> tuple[int, FileOp]:
    path = _path(lines[i], UPDATE, i)
    i += 1
    move_to = None
    if i < len(lines) and lines[i].startswith(MOVE):
        move_to, i = _path(lines[i], MOVE, i), i + 1
    hunks: list[Hunk] = []
    while i < len(lines) and not (lines[i].startswith("*** ") and lines[i].strip() != END_OF_FILE):
        header = None
        if lines[i].startswith("@@"):
            header, i = lines[i][2:].strip(), i + 1
        elif hunks or not lines[i][:1] in (" ", "-", "+"):
            raise PatchError(f"patch line {i + 1}: expected an '@@' hunk header, got {lines[i][:80]!r}.")
        body: list[tuple[str, str]] = []
        end_of_file = False
        while i < len(lines) and not lines[i].startswith("@@") and not lines[i].startswith("*** "):
            line = lines[i]
            if line == "":
                body.append((" ", ""))  # a blank context line whose leading space was lost
            elif line[0] in " -+":
                body.append((line[0], line[1:]))
            else:
                raise PatchError(f"patch line {i + 1}: hunk lines start with ' ', '-' or '+', got {line[:80]!r}.")
            i += 1
        if i < len(lines) and lines[i].strip() == END_OF_FILE:
            end_of_file, i = True, i + 1
        elif i >= len(lines) or lines[i].startswith("*** "):
            while body and body[-1] == (" ", ""):
                body.pop()  # blank lines before the next file header are layout, not context
        if not body:
            raise PatchError(f"patch line {i}: an empty hunk in {path}; a hunk needs ' ', '-' or '+' lines.")
        hunks.append(Hunk(header or "", tuple(body), end_of_file))
    if not hunks and move_to is None:
        raise PatchError(f"'{UPDATE}{path}' has no hunks; add '@@' hunks, or leave the file out.")
    return i, FileOp("update", path, move_to=move_to, hunks=tuple(hunks))


def _path(line: str, prefix: str, i: int) -> str:
    path = line[len(prefix):].strip()
    if not path:
        raise PatchError(f"patch line {i + 1}: '{prefix.strip()}' needs a path.")
    return path


def _unwrap(text: str) -> str:
    """Drop a Markdown fence around the patch and surrounding blank lines; keep everything else."""
    stripped = text.strip("\n").replace("\r\n", "\n")
    lines = stripped.split("\n")
    if lines and lines[0].strip().startswith("```") and lines[-1].strip() == "```":
        lines = lines[1:-1]
    return "\n".join(lines).strip("\n")

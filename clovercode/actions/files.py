"""Reading tools: view_file, list_files, search_text (the writing ones are in editing.py)."""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from clovercode.actions.context import Observation, ToolContext, ToolError
from clovercode.actions.fileio import read_text
from clovercode.actions.listing import project_files
from clovercode.actions.paths import display, resolve_in_root
from clovercode.trust.terminal import inert

VIEW_MAX_LINES = 400
LIST_MAX_ENTRIES = 500


def view_file(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    path = resolve_in_root(ctx.view, args["path"], must_exist=True)
    shown = display(ctx.root, path)
    ctx.guard.check_read(path, shown)  # the resolved target: a link's name says nothing
    content = ctx.files.read(path, shown)  # an editor's unsaved buffer when clovercode runs in one
    ctx.stamps.record(path, content.digest)  # read-before-edit: the model has now seen this version
    lines = split_lines(content.text)
    total = len(lines)
    start = args.get("start_line", 1)
    end = args.get("end_line", total)
    if total == 0:
        return Observation(True, f"{shown} is empty.")
    if start > total:
        raise ToolError(f"start_line {start} is past the end of {shown} ({total} lines).")
    if end < start:
        raise ToolError(f"end_line {end} is before start_line {start}.")
    end = min(end, total, start + VIEW_MAX_LINES - 1)
    width = len(str(end))
    body = "\n".join(f"{n:>{width}}\t{lines[n - 1]}" for n in range(start, end + 1))
    more = f"\n[{total - end} more lines; view with start_line={end + 1}]" if end < total else ""
    return Observation(True, f"{shown} (lines {start}-{end} of {total})\n{body}{more}", {"path": shown})


def list_files(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    base = resolve_in_root(ctx.view, args.get("path") or ".", must_exist=True)
    if ctx.view.kind(base) != "dir":
        raise ToolError(f"'{args.get('path')}' is a file, not a directory; use view_file to read it.")
    depth, pattern = args.get("max_depth", 3), args.get("pattern")
    entries: list[str] = []
    for path in project_files(ctx.view, base):
        if ctx.view.is_secret(ctx.view.resolve(path)):  # where a link inside the project leads
            continue
        rel = path.relative_to(base)
        if len(rel.parts) > depth or (pattern and not fnmatch.fnmatch(path.name, pattern)):
            continue
        entries.append(inert(display(ctx.root, path), newlines=False))  # one name per line: a newline in one is written out
    if not entries:
        return Observation(True, "No files found.")
    shown = entries[:LIST_MAX_ENTRIES]
    more = f"\n[{len(entries) - len(shown)} more not shown; narrow with path or pattern]" if len(entries) > len(shown) else ""
    return Observation(True, "\n".join(shown) + more)


def search_text(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    flags = 0 if args.get("case_sensitive", True) else re.IGNORECASE
    try:
        regex = re.compile(args["pattern"], flags)
    except re.error as exc:
        raise ToolError(f"pattern is not a valid regular expression: {exc}. Escape special characters such as ( [ . *") from None
    base = resolve_in_root(ctx.view, args.get("path") or ".", must_exist=True)
    limit, glob = args.get("max_results", 100), args.get("glob")
    hits: list[str] = []
    files = [base] if ctx.view.kind(base) == "file" else project_files(ctx.view, base)
    for path in files:
        if (glob and not fnmatch.fnmatch(path.name, glob)) or ctx.view.is_secret(ctx.view.resolve(path)):
            continue
        try:
            text = read_text(ctx.view, path, display(ctx.root, path)).text
        except ToolError:
            continue  # binary, unreadable or huge files are not searched
        for number, line in enumerate(split_lines(text), 1):
            if regex.search(line):
                hits.append(f"{inert(display(ctx.root, path), newlines=False)}:{number}: {line.strip()[:200]}")
                if len(hits) > limit:
                    break
        if len(hits) > limit:
            break
    if not hits:
        return Observation(True, f"No matches for {args['pattern']!r}.")
    more = f"\n[more matches not shown; limit {limit}]" if len(hits) > limit else ""
    return Observation(True, "\n".join(hits[:limit]) + more)


def split_lines(text: str) -> list[str]:
    """Lines as edit_file and apply_patch count them: split on "\n" only (a stray form feed or
    U+2028 inside a line must not shift the numbers the model sees)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]

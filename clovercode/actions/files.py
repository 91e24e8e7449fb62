"""File tools: view_file, list_files, search_text, edit_file, write_file."""

from __future__ import annotations

import difflib
import fnmatch
import re
from typing import Any

from clovercode.actions.context import ApprovalRequest, Observation, ToolContext, ToolError
from clovercode.actions.fileio import read_text, write_atomic
from clovercode.actions.listing import project_files
from clovercode.actions.paths import display, resolve_in_root

VIEW_MAX_LINES = 400
LIST_MAX_ENTRIES = 500


def view_file(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    path = resolve_in_root(ctx.root, args["path"], must_exist=True)
    shown = display(ctx.root, path)
    lines = read_text(path, shown).text.splitlines()
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
    base = resolve_in_root(ctx.root, args.get("path") or ".", must_exist=True)
    if not base.is_dir():
        raise ToolError(f"'{args.get('path')}' is a file, not a directory; use view_file to read it.")
    depth, pattern = args.get("max_depth", 3), args.get("pattern")
    entries: list[str] = []
    for path in project_files(ctx.root, base):
        rel = path.relative_to(base)
        if len(rel.parts) > depth or (pattern and not fnmatch.fnmatch(path.name, pattern)):
            continue
        entries.append(display(ctx.root, path))
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
    base = resolve_in_root(ctx.root, args.get("path") or ".", must_exist=True)
    limit, glob = args.get("max_results", 100), args.get("glob")
    hits: list[str] = []
    files = [base] if base.is_file() else project_files(ctx.root, base)
    for path in files:
        if glob and not fnmatch.fnmatch(path.name, glob):
            continue
        try:
            text = read_text(path, display(ctx.root, path)).text
        except ToolError:
            continue  # binary, unreadable or huge files are not searched
        for number, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                hits.append(f"{display(ctx.root, path)}:{number}: {line.strip()[:200]}")
                if len(hits) > limit:
                    break
        if len(hits) > limit:
            break
    if not hits:
        return Observation(True, f"No matches for {args['pattern']!r}.")
    more = f"\n[more matches not shown; limit {limit}]" if len(hits) > limit else ""
    return Observation(True, "\n".join(hits[:limit]) + more)


def edit_file(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    path = resolve_in_root(ctx.root, args["path"], must_exist=True)
    shown = display(ctx.root, path)
    original = read_text(path, shown)
    old, new = args["old_text"], args["new_text"]
    count = original.text.count(old)
    if count == 0:
        raise ToolError(f"old_text was not found in {shown}. View the file and copy the text exactly, including indentation.")
    if count > 1 and not args.get("replace_all", False):
        raise ToolError(f"old_text occurs {count} times in {shown} (lines {_line_numbers(original.text, old)}); "
                        "include more surrounding lines so it matches once, or set replace_all to true.")
    updated = original.text.replace(old, new) if args.get("replace_all") else original.text.replace(old, new, 1)
    return _write(ctx, path, shown, original.text, updated, original.encoding)


def write_file(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    path = resolve_in_root(ctx.root, args["path"])
    shown = display(ctx.root, path)
    if path.is_dir():
        raise ToolError(f"'{shown}' is a directory.")
    before = read_text(path, shown) if path.exists() else None
    return _write(ctx, path, shown, before.text if before else "", args["content"], before.encoding if before else "utf-8")


def _write(ctx: ToolContext, path, shown: str, before: str, after: str, encoding: str) -> Observation:
    diff = unified_diff(shown, before, after)
    if before == after:
        return Observation(True, f"{shown} is unchanged (the new text equals the old).")
    if not ctx.approve(ApprovalRequest("edit", f"edit {shown}", diff)):
        raise ToolError(f"The user declined the change to {shown}.")
    write_atomic(path, after, encoding)
    ctx.changed.add(shown)
    return Observation(True, f"Changed {shown}:\n{diff}", {"path": shown, "diff": diff})


def unified_diff(shown: str, before: str, after: str, context: int = 2) -> str:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), f"a/{shown}", f"b/{shown}", n=context, lineterm="")
    return "\n".join(lines)


def _line_numbers(text: str, needle: str) -> str:
    numbers, start = [], 0
    while (index := text.find(needle, start)) != -1:
        numbers.append(str(text.count("\n", 0, index) + 1))
        start = index + 1
    return ", ".join(numbers)

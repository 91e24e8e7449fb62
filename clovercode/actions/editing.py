"""edit_file and write_file, and the one path every file change takes: guard → approval →
checkpoint → atomic writes (all or nothing) → a compact diff as the observation."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from clovercode.actions.context import ApprovalRequest, FileChange, Observation, ToolContext, ToolError
from clovercode.actions.fileio import NEW_FILE, FileAccess, TextFile, digest
from clovercode.actions.matching import replace_text
from clovercode.actions.paths import display, resolve_in_root


@dataclass(frozen=True)
class Change:
    """One file's new state. ``before`` None: the file is created; ``after`` None: it is deleted."""

    path: Path
    shown: str
    before: TextFile | None
    after: str | None
    like: TextFile = NEW_FILE  # format (encoding, line endings, mode) a new file takes on
    old_shown: str | None = None  # for a move: where the text came from (``like`` holds it)
    quiet: bool = False  # the deleting half of a move: no diff or label of its own


def editable(ctx: ToolContext, given: str, *, must_exist: bool = True) -> tuple[Path, str]:
    path = resolve_in_root(ctx.view, given, must_exist=must_exist)
    shown = display(ctx.root, path)
    if ctx.view.kind(path) == "dir":
        raise ToolError(f"'{shown}' is a directory.")
    ctx.guard.check_write(ctx.root, path, shown)
    return path, shown


def read_for_edit(ctx: ToolContext, path: Path, shown: str) -> TextFile:
    """The file's content, after checking the model saw this exact version."""
    current = ctx.files.read(path, shown)
    ctx.stamps.require_current(path, shown, current.digest)
    return current


def edit_file(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    path, shown = editable(ctx, args["path"])
    original = read_for_edit(ctx, path, shown)
    old, new = args["old_text"], args["new_text"]
    if original.newline == "\r\n":
        old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
    replaced = replace_text(original.text, old, new, shown, bool(args.get("replace_all")))
    notes = []
    if replaced.layer != "exact":
        notes.append(f"old_text matched only when ignoring {replaced.layer}; check the result.")
    if replaced.count > 1:
        notes.append(f"Replaced {replaced.count} occurrences.")
    return commit_changes(ctx, [Change(path, shown, original, replaced.text)], notes)


def write_file(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    path, shown = editable(ctx, args["path"], must_exist=False)
    before = read_for_edit(ctx, path, shown) if ctx.view.kind(path) is not None else None
    return commit_changes(ctx, [Change(path, shown, before, args["content"])])


def commit_changes(ctx: ToolContext, changes: Sequence[Change], notes: Sequence[str] = ()) -> Observation:
    """Ask, checkpoint, then write every change atomically; if one write fails, undo the others."""
    changes = [c for c in changes if c.before is None or c.after is None or c.before.text != c.after
               or c.old_shown is not None]
    if not changes:
        return Observation(True, "Nothing changed: the new text equals the old.")
    encoded = [_encode(c) for c in changes]  # encoding problems surface before anything is asked or written
    diff = "\n".join(filter(None, (unified_diff(c) for c in changes)))
    labels = ", ".join(_label(c) for c in changes if not c.quiet)
    title = "edit " + labels
    files = tuple(FileChange(c.shown, c.before.text if c.before is not None else None, c.after) for c in changes)
    if not ctx.approve(ApprovalRequest("edit", title, diff, changes=files)):
        raise ToolError(f"The user declined the change ({title}). Ask what they want instead, or try another approach.")
    warning = ctx.checkpoint()
    done: list[tuple[Change, bytes | None]] = []
    try:
        for change, data in zip(changes, encoded):
            _apply(ctx.files, change, data)
            done.append((change, data))
    except OSError as exc:
        _roll_back(ctx.files, done)
        raise ToolError(f"Writing {change.shown} failed ({exc.strerror or exc}); nothing was changed.") from None
    for change, data in done:
        if data is None:
            ctx.stamps.forget(change.path)
        else:
            ctx.stamps.record(change.path, digest(data))
        ctx.changed.add(change.shown)
    if ctx.bytecode is not None:
        ctx.bytecode.changed(change.path for change, _ in done)
    added = sum(1 for line in diff.split("\n") if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in diff.split("\n") if line.startswith("-") and not line.startswith("---"))
    head = f"Changed {labels} (+{added} -{removed})"
    text = "\n".join([head + ":", diff, *notes, *([warning] if warning else [])])
    shown = [c.shown for c in changes if not c.quiet]
    return Observation(True, text, {"path": shown[0], "paths": shown, "diff": diff})


def unified_diff(change: Change, context: int = 2) -> str:
    if change.quiet:
        return ""
    before = change.before.text if change.before else (change.like.text if change.old_shown else "")
    after = change.after if change.after is not None else ""
    source = change.old_shown or change.shown
    old_name = f"a/{source}" if change.before is not None or change.old_shown else "/dev/null"
    new_name = f"b/{change.shown}" if change.after is not None else "/dev/null"
    lines = difflib.unified_diff(_lines(before), _lines(after), old_name, new_name, n=context, lineterm="")
    return "\n".join(lines)


def _lines(text: str) -> list[str]:
    """Lines split at ``\\n`` only: ``str.splitlines`` also splits at ``\\x0c``, ``\\x1c`` and U+2028,
    and a diff split there would never show that character (the approval writes it out)."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _label(change: Change) -> str:
    if change.old_shown:
        return f"{change.old_shown} → {change.shown}"
    if change.before is None:
        return f"{change.shown} (new)"
    if change.after is None:
        return f"{change.shown} (deleted)"
    return change.shown


def _encode(change: Change) -> bytes | None:
    if change.after is None:
        return None
    return (change.before or change.like).encode(change.after, change.shown)


def _apply(files: FileAccess, change: Change, data: bytes | None) -> None:
    if data is None:
        files.delete(change.path)
    else:
        files.write(change.path, data, None if change.before else change.like.mode)


def _roll_back(files: FileAccess, done: list[tuple[Change, bytes | None]]) -> None:
    for change, _ in reversed(done):
        try:
            if change.before is None:
                files.delete(change.path)
            else:
                files.write(change.path, change.before.encode(change.before.text, change.shown), change.before.mode)
        except OSError:
            pass  # best effort: the checkpoint still has the original

"""apply_patch: plan every file of the patch in memory first (paths, guards, read-before-edit,
hunks), and only when all of it fits, write it through the shared commit path. A patch that
fails anywhere changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clovercode.actions.context import Observation, ToolContext
from clovercode.actions.editing import Change, commit_changes, editable, read_for_edit
from clovercode.actions.patch import FileOp, PatchError, apply_hunks, parse_patch


def apply_patch(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    ops = parse_patch(args["patch"])
    changes: list[Change] = []
    claimed: dict[Path, str] = {}
    for op in ops:
        changes.extend(_plan(ctx, op, claimed))
    return commit_changes(ctx, changes)


def _claim(claimed: dict[Path, str], path: Path, shown: str) -> None:
    if path in claimed:
        raise PatchError(f"{shown} appears more than once in the patch; put all of its changes under one "
                         "'*** Update File:' header. Nothing was changed.")
    claimed[path] = shown


def _plan(ctx: ToolContext, op: FileOp, claimed: dict[Path, str]) -> list[Change]:
    if op.kind == "add":
        path, shown = editable(ctx, op.path, must_exist=False)
        _claim(claimed, path, shown)
        if ctx.view.kind(path) is not None:
            raise PatchError(f"'*** Add File: {shown}': the file already exists; use '*** Update File:' to change it. "
                             "Nothing was changed.")
        return [Change(path, shown, None, op.content)]
    path, shown = editable(ctx, op.path, must_exist=False)
    _claim(claimed, path, shown)
    if ctx.view.kind(path) is None:
        raise PatchError(f"{shown} does not exist, so it cannot be {'deleted' if op.kind == 'delete' else 'updated'}. "
                         "Use list_files to find the right path. Nothing was changed.")
    if op.kind == "delete":
        return [Change(path, shown, ctx.files.read(path, shown), None)]
    original = read_for_edit(ctx, path, shown)
    updated = apply_hunks(original.text, op.hunks, shown) if op.hunks else original.text
    if op.move_to is None:
        return [Change(path, shown, original, updated)]
    target, target_shown = editable(ctx, op.move_to, must_exist=False)
    _claim(claimed, target, target_shown)
    if ctx.view.kind(target) is not None:
        raise PatchError(f"'*** Move to: {target_shown}': that file already exists. Nothing was changed.")
    return [Change(target, target_shown, None, updated, like=original, old_shown=shown),
            Change(path, shown, original, None, quiet=True)]

"""Bodies of ``clovercode undo`` and the REPL's ``/undo``: restore the last checkpoint."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from clovercode.vcs.checkpoint import CHECKPOINTS, UNDONE, Restored, Snapshot, open_store, redo, undo


def _when(snap: Snapshot) -> str:
    return _dt.datetime.fromtimestamp(snap.created).strftime("%Y-%m-%d %H:%M:%S")


def describe(result: Restored, redoing: bool) -> str:
    files = ", ".join(result.changed[:12]) + (f" and {len(result.changed) - 12} more" if len(result.changed) > 12 else "")
    what = "Redid" if redoing else "Restored"
    back = "`clovercode undo` (or /undo)" if redoing else "`clovercode undo --redo` (or /redo)"
    count = len(result.changed)
    return (f"{what} {count} file{'' if count == 1 else 's'} to the state of {_when(result.snapshot)} "
            f"({result.snapshot.label}): {files or 'no files'}.\n"
            f"Your files as they were just before are saved; {back} brings them back.")


def run_undo(root: Path, console: Console, *, redoing: bool = False) -> None:
    """Undo (or redo); a NothingToUndo propagates for the caller to report."""
    result = (redo if redoing else undo)(root, os.environ)
    console.print(escape(describe(result, redoing)), highlight=False)


def list_checkpoints(root: Path, console: Console) -> None:
    store = open_store(root, os.environ)
    for kind, title in ((CHECKPOINTS, "checkpoints (undo restores the newest that differs from now)"),
                        (UNDONE, "states replaced by undo (redo restores the newest)")):
        snaps = store.list(kind)
        console.print(f"[bold]{title}[/]: {len(snaps)}", highlight=False)
        for snap in snaps:
            console.print(f"  {_when(snap)}  {escape(snap.label)}", highlight=False)

"""The change a run made: the working tree's difference from the start, whoever wrote it (a file tool
or a command), as one git tree. The tests run on that tree and the commit holds exactly it, so what
is reported as tested is what is committed. Files left out on purpose are named with the reason."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from clovercode.trust import gitsafe

if TYPE_CHECKING:
    from clovercode.vcs.git import Checkout, Start

MAX_FILE_BYTES = 10 * 2**20  # larger files are left out: a fix is source, and hosts refuse huge blobs
MAX_BINARY_BYTES = 1 * 2**20  # binary files above this are left out (a build output, a core dump)
SNIFF_BYTES = 8000  # git's own rule: a NUL in the first 8000 bytes makes a file binary
UNTRACKED_BEFORE = "untracked before the run"
IGNORED = "ignored by git"
BY_TESTS = "written by the baseline test run"
NESTED_REPO = "a nested git repository"


@dataclass(frozen=True)
class LeftOut:
    path: str  # top-relative
    reason: str

    def describe(self) -> str:
        return f"{self.path} ({self.reason})"


@dataclass(frozen=True)
class ChangeSet:
    """``tree`` is the commit-to-be's tree; ``paths`` every path it changes (added, modified, deleted,
    mode or type changed); ``left_out`` what differs from the start but is deliberately not in it."""

    tree: str
    paths: tuple[str, ...] = ()
    left_out: tuple[LeftOut, ...] = field(default_factory=tuple)

    def __bool__(self) -> bool:
        return bool(self.paths)


def untracked_stamps(top: Path, paths: Iterable[str]) -> dict[str, tuple[int, int, int]]:
    """(mode, size, mtime_ns) of each untracked file at the start: a later change to one is noticed."""
    stamps = {}
    for rel in paths:
        try:
            info = (top / rel).lstat()
        except OSError:
            continue
        stamps[rel] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return stamps


def _too_big(file: Path) -> str | None:
    """Why ``file`` is left out by size, or None (links and special files are never opened)."""
    try:
        info = file.lstat()
    except OSError:
        return None  # deleted: a deletion is always part of the change
    if not stat.S_ISREG(info.st_mode):
        return None
    if info.st_size > MAX_FILE_BYTES:
        return f"over {MAX_FILE_BYTES // 2**20} MiB"
    if info.st_size > MAX_BINARY_BYTES:
        try:
            with open(file, "rb") as handle:
                head = handle.read(SNIFF_BYTES)
        except OSError:
            return "unreadable"
        if b"\0" in head:
            return f"binary, over {MAX_BINARY_BYTES // 2**20} MiB"
    return None


MAX_NAMED_IGNORED = 20  # more ignored files than this in one top directory are named as that directory


def _ignored_left_out(checkout: "Checkout", paths: list[str]) -> list[LeftOut]:
    """Ignored paths the run changed, each named (a deleted one says so); a directory with many (a
    package installed into .venv) is named once, with the count, so the list stays readable."""
    by_dir: dict[str, list[str]] = {}
    for rel in paths:
        by_dir.setdefault(rel.split("/", 1)[0] if "/" in rel else "", []).append(rel)
    left = []
    for folder, inside in by_dir.items():
        if folder and len(inside) > MAX_NAMED_IGNORED:
            left.append(LeftOut(folder + "/", f"{IGNORED}: {len(inside)} files in it changed"))
            continue
        left += [LeftOut(rel, IGNORED if os.path.lexists(checkout.top / rel) else IGNORED + ", deleted") for rel in inside]
    return left


def change_set(checkout: "Checkout", start: "Start", written: Iterable[str] = (), by_tests: Iterable[str] = ()) -> ChangeSet:
    """The working tree now against ``start.base``, less ignored files, files that were untracked at
    the start, nested repositories and files over the size limits (named in ``left_out``, with the
    ignored files among ``written``: top-relative paths the file tools wrote or a command changed,
    fixflow/changes.py). ``by_tests``: files in
    ``start.untracked`` that the baseline test run wrote, named for what they are."""
    tests_wrote = set(by_tests)
    with tempfile.TemporaryDirectory(prefix="clovercode-index-") as scratch:
        # a private index: the user's own is never touched, and nothing a command git-added
        # (--sandbox none) slips in or out; it starts as a copy so git's stat cache saves rehashing
        index = os.path.join(scratch, "index")
        own = Path(checkout.git("rev-parse", "--path-format=absolute", "--git-path", "index").strip())
        if own.is_file():
            # copy2: the copy keeps the index's own mtime, by which git tells a racily clean entry (a file
            # rewritten at the same size within the clock's step of the index write) from a clean one; a
            # copy stamped "now" made such an edit look unchanged, and the change set missed it
            shutil.copy2(own, index)
        env = {"GIT_INDEX_FILE": index, "GIT_LITERAL_PATHSPECS": "1"}
        checkout.git_env(env, "read-tree", "-m", start.base)  # -m: keeps stat data where the entry matches
        checkout.refresh(env)
        tracked = [p for p in checkout.git_env(env, "diff-files", "--name-only", "-z").split("\0") if p]
        untracked = [p for p in checkout.git_env(env, "ls-files", "-z", "--others", "--exclude-standard").split("\0") if p]
        left: list[LeftOut] = []
        candidates: list[str] = list(tracked)
        for rel in untracked:
            if rel.endswith("/"):  # a nested repository is listed as its directory, never entered
                left.append(LeftOut(rel.rstrip("/"), NESTED_REPO))
            elif rel not in start.untracked:
                candidates.append(rel)
            elif start.stamps.get(rel) != untracked_stamps(checkout.top, [rel]).get(rel):
                left.append(LeftOut(rel, BY_TESTS if rel in tests_wrote else UNTRACKED_BEFORE))
        left += [LeftOut(rel, (BY_TESTS if rel in tests_wrote else UNTRACKED_BEFORE) + ", deleted")
                 for rel in sorted(start.untracked)
                 if not os.path.lexists(checkout.top / rel)]
        quiet = set(start.untracked) | set(candidates)  # tracked files git ignores are committed all the same
        left += _ignored_left_out(checkout, sorted(checkout.ignored(sorted(set(written) - quiet))))
        chosen = []
        for rel in sorted(set(candidates)):
            why = _too_big(checkout.top / rel)
            if why:
                left.append(LeftOut(rel, why))
            else:
                chosen.append(rel)
        if chosen:
            listing = os.path.join(scratch, "paths")
            Path(listing).write_bytes(b"\0".join(os.fsencode(p) for p in chosen))
            checkout.git_env(env, "add", "-A", f"--pathspec-from-file={listing}", "--pathspec-file-nul")
        tree = checkout.git_env(env, "write-tree").strip()
        changed = [p for p in checkout.git_env(env, "diff", *gitsafe.DIFF_FLAGS, "--cached", "--name-only",
                                               "--no-renames", "-z", start.base).split("\0") if p]
    return ChangeSet(tree, tuple(changed), tuple(sorted(set(left), key=lambda item: item.path)))

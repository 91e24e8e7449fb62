"""A clean, temporary checkout of one tree: the commit `fix` is about to publish, with nothing of the
working tree in it (no ignored, untracked or left-out file), so its tests say whether the commit
alone passes. Removed on every way out; nothing of it stays in the repository.

It is a ``git worktree`` (tests that ask git about their checkout still work) of a commit made from
the tree on the base, reached by no ref: the worktree's own HEAD is the only thing that names it,
and it goes with the worktree.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from clovercode.ground.errors import VcsError

if TYPE_CHECKING:
    from clovercode.vcs.git import Checkout

PREFIX = "clovercode-clean-"
# Directories that hold a project's toolchain, not its source: the clean checkout gets a link to the
# working tree's (the tests need their interpreter and packages), and only when the run changed no
# file in it (fixflow/cleanrun.py decides). Nothing else of the working tree is ever linked.
ENVIRONMENT_DIRS = (".venv", "venv", "node_modules")
# clovercode's own commit object for the checkout: fixed identity, so a CI runner without
# user.name/user.email can make it, and nothing of the user's is in it
IDENTITY = {"GIT_AUTHOR_NAME": "clovercode", "GIT_AUTHOR_EMAIL": "clovercode@users.noreply.github.com",
            "GIT_COMMITTER_NAME": "clovercode", "GIT_COMMITTER_EMAIL": "clovercode@users.noreply.github.com",
            "GIT_AUTHOR_DATE": "@0 +0000", "GIT_COMMITTER_DATE": "@0 +0000"}
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def held_signals() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait until the block is done (then they arrive as usual), so a
    clean-up is never cut half way. Only the main thread can hold them; elsewhere nothing is held.

    Held by handler, not by signal mask: a mask is the calling thread's own, and a signal sent to the
    process is delivered to any thread that does not block it (clovercode has several), whose Python
    handler then runs in the main thread all the same; and a blocked mask is inherited by every process
    started inside the block, which a stop could then not reach."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # Read before anything is swapped, and put back from here: an interrupt that lands while the
    # handlers are being swapped still finds every one of them restored
    saved = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    held = [signum for signum, handler in saved.items() if handler is not None]  # None: not Python's to swap
    arrived: list[int] = []
    try:
        for signum in held:
            signal.signal(signum, lambda number, frame: arrived.append(number))
        yield
    finally:
        for signum in held:
            signal.signal(signum, saved[signum])
        for signum in dict.fromkeys(arrived):  # each once, as the first of several would have been
            signal.raise_signal(signum)


@contextmanager
def clean_checkout(checkout: "Checkout", tree: str, base: str, links: Iterable[tuple[str, Path]] = ()) -> Iterator[Path]:
    """A temporary worktree holding exactly ``tree`` (a commit on ``base``); its top directory.

    ``links``: (top-relative path, working-tree directory) pairs linked in for the tests' toolchain
    (:data:`ENVIRONMENT_DIRS`); a path the tree itself holds is never replaced by a link.
    """
    scratch = Path(tempfile.mkdtemp(prefix=PREFIX)).resolve()
    top = scratch / scratch.name  # the worktree's name in .git/worktrees says whose it is
    added = False
    try:
        commit = checkout.git_env(IDENTITY, "commit-tree", f"{tree}^{{tree}}", "-p", base,
                                  "-m", "clovercode: clean-checkout check (temporary)").strip()
        added = True  # from here a failed add may still have left its administrative directory
        checkout.git("worktree", "add", "-q", "--detach", str(top), commit)
        for rel, source in links:
            target = top / rel
            if os.path.lexists(target) or not source.is_dir():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(source, target, target_is_directory=True)
        yield top
    finally:
        with held_signals():
            remove(checkout, top, scratch, [rel for rel, _ in links], added)


def remove(checkout: "Checkout", top: Path, scratch: Path, links: Iterable[str], added: bool) -> None:
    """The worktree, its administrative directory in .git/worktrees and the scratch directory.
    The links go first, by unlinking them: no removal ever walks into the working tree's toolchain."""
    for rel in links:
        target = top / rel
        if target.is_symlink():
            target.unlink()
    admin = _admin_dir(top)
    if added:
        try:
            checkout.git("worktree", "remove", "--force", "--force", str(top))
        except VcsError:
            pass  # the directories go below either way
    shutil.rmtree(scratch, ignore_errors=True)
    if admin is not None and admin.name.startswith(PREFIX):
        shutil.rmtree(admin, ignore_errors=True)


def _admin_dir(top: Path) -> Path | None:
    """Where git keeps the worktree's HEAD and index (from its ``.git`` file), if it was made."""
    try:
        text = (top / ".git").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    return Path(text.removeprefix("gitdir:").strip())


def environment_links(checkout: "Checkout", subdirs: Iterable[str], untouchable: Iterable[str]) -> list[tuple[str, Path]]:
    """The toolchain directories of the working tree to link into a clean checkout: each of
    :data:`ENVIRONMENT_DIRS` at the top or in ``subdirs`` (top-relative, the project root of a
    monorepo's subproject) that is a directory, and in which no path of ``untouchable`` (files the
    run changed) lies: a module the model wrote into ``.venv`` must not come back through the link."""
    touched = list(untouchable)
    found: list[tuple[str, Path]] = []
    for sub in dict.fromkeys(["", *subdirs]):
        for name in ENVIRONMENT_DIRS:
            rel = f"{sub.strip('/')}/{name}".lstrip("/") if sub not in ("", ".") else name
            source = checkout.top / rel
            if not source.is_dir():  # a link to a shared virtualenv is linked to as it is
                continue
            if any(path == rel or path.startswith(rel + "/") for path in touched):
                continue
            found.append((rel, source))
    return found

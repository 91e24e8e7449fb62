"""Where each attempt of ``fix --attempts N`` works: a temporary ``git worktree`` of the start commit
(the user's checkout and index are never touched), and, once it has a commit, a private ref
``refs/clovercode/attempts/<run>/<k>`` that keeps the commit while the attempts are compared.
Worktrees and refs are removed on every way out; only the chosen commit reaches a branch
(:func:`land`), and it is the attempt's own commit, so its sha is the one the attempt reported.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from clovercode.ground.errors import VcsError
from clovercode.vcs.cleancheckout import _admin_dir, held_signals

if TYPE_CHECKING:
    from clovercode.vcs.git import Checkout, Start

PREFIX = "clovercode-attempt-"
REF_PREFIX = "refs/clovercode/attempts/"


@dataclass
class AttemptTree:
    """One attempt's worktree: ``top`` its top directory, ``ref`` the private ref its commit goes to."""

    k: int
    top: Path
    scratch: Path
    ref: str
    links: tuple[str, ...] = ()
    added: bool = False


def make_tree(checkout: "Checkout", start: "Start", run: str, k: int,
              links: Iterable[tuple[str, Path]] = ()) -> AttemptTree:
    """A detached worktree of ``start.base`` for attempt ``k`` of ``run``; ``links``: toolchain
    directories of the user's checkout (vcs/cleancheckout.py ENVIRONMENT_DIRS) linked in, so the tests
    find their interpreter and packages. Removed again (:func:`remove_tree`) if it cannot be made."""
    scratch = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{run}-{k}-")).resolve()
    tree = AttemptTree(k, scratch / scratch.name, scratch, f"{REF_PREFIX}{run}/{k}")
    try:
        tree.added = True  # a failed add may still have left its administrative directory
        checkout.git("worktree", "add", "-q", "--detach", str(tree.top), start.base)
        made = []
        for rel, source in links:
            target = tree.top / rel
            if os.path.lexists(target) or not source.is_dir():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(source, target, target_is_directory=True)
            made.append(rel)
        tree.links = tuple(made)
    except BaseException:
        with held_signals():
            remove_tree(checkout, tree)
        raise
    return tree


def remove_tree(checkout: "Checkout", tree: AttemptTree) -> None:
    """The worktree (links unlinked first: no removal walks into the user's toolchain), its
    administrative directory, its scratch directory and its private ref."""
    for rel in tree.links:
        target = tree.top / rel
        if target.is_symlink():
            target.unlink()
    admin = _admin_dir(tree.top)
    if tree.added:
        try:
            checkout.git("worktree", "remove", "--force", "--force", str(tree.top))
        except VcsError:
            pass  # the directories go below either way
    shutil.rmtree(tree.scratch, ignore_errors=True)
    if admin is not None and admin.name.startswith(PREFIX):
        shutil.rmtree(admin, ignore_errors=True)
    if checkout.ref_exists(tree.ref):
        checkout.delete_ref(tree.ref)


def remove_run_refs(checkout: "Checkout", run: str) -> None:
    """Every private ref of ``run`` (one an attempt made after its tree was listed, too)."""
    out = checkout.git("for-each-ref", "--format=%(refname)", f"{REF_PREFIX}{run}/")
    for ref in out.split():
        checkout.delete_ref(ref)


def store_commit(checkout: "Checkout", base: str, tree: str, message: str, author: tuple[str, str],
                 committer: tuple[str, str], ref: str) -> str:
    """Commit ``tree`` on ``base`` (no hooks, no index, no working tree) and point ``ref`` at it
    (which must not exist yet); the commit's sha. The message carries the ownership trailer, as
    every fix commit does (vcs/branchguard.py)."""
    from clovercode.vcs.branchguard import with_trailer

    env = {"GIT_AUTHOR_NAME": author[0], "GIT_AUTHOR_EMAIL": author[1],
           "GIT_COMMITTER_NAME": committer[0], "GIT_COMMITTER_EMAIL": committer[1]}
    sha = checkout.git_env(env, "commit-tree", f"{tree}^{{tree}}", "-p", base, "-m", with_trailer(message, tree)).strip()
    checkout.git("update-ref", ref, sha, "")
    return sha


def land(checkout: "Checkout", start: "Start", branch: str, commit: str, expected: str | None) -> tuple[str | None, str | None]:
    """Point ``branch`` at the chosen attempt's ``commit`` (compare-and-swap against ``expected``, its
    tip when the run was planned; an existing tip is kept under a backup ref) and switch the user's
    checkout to it, as a single fix does. Returns (backup ref, why the checkout stayed where it was).
    git's own checkout never overwrites local changes or untracked files: if it refuses, the branch
    holds the fix and the checkout is left as it was."""
    from clovercode.vcs.branchguard import backup_ref

    current = checkout.unmoved(start, branch, expected, "The attempts' work was in temporary worktrees.")
    backup = backup_ref(checkout, branch, current) if current else None
    checkout.git("update-ref", f"refs/heads/{branch}", commit, current or "")
    try:
        checkout.git("checkout", "-q", branch)
    except VcsError as exc:
        return backup, str(exc)
    return backup, None

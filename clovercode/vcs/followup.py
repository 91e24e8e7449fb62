"""One follow-up commit on someone's pull-request branch, pushed without any force.

`respond` works on a branch people share. So: the branch is taken as the remote has it (a local copy
is only fast-forwarded, never reset past its own commits); the commit goes on top; before the push
the remote is fetched again, and if the branch moved meanwhile nothing is pushed — the follow-up
stays on the local branch and the remote keeps what others pushed. The push itself is a plain one,
which the remote accepts only as a fast-forward, so a move between that fetch and the push is
refused by the remote too. No rebase, no merge: a person decides what to do with both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from clovercode.ground.errors import VcsError
from clovercode.vcs.branches import valid_branch_name
from clovercode.vcs.changeset import ChangeSet
from clovercode.vcs.git import Checkout, Start

INCOMING = "refs/clovercode/incoming/"


class BranchMoved(VcsError):
    """The pull request's branch moved on the remote during the run: the follow-up was not pushed."""

    def __init__(self, branch: str, start: str, now: str | None, commit: str):
        moved = f"to {now[:12]}" if now else "(it is gone)"
        super().__init__(f"the branch {branch} moved on the remote during the run (from {start[:12]} {moved}); "
                         f"nothing was pushed",
                         hint=f"Nothing is lost: the follow-up commit {commit[:12]} is on the local branch {branch}, "
                              "and the remote keeps what was pushed meanwhile. Ask again to work on the new tip.")
        self.now = now


@dataclass
class FollowUp:
    checkout: Checkout
    remote: str
    branch: str
    start: Start  # HEAD on the branch as fetched, before the model ran
    env: Mapping[str, str] | None = None  # push credentials (fix.push_token)


def remote_tip(checkout: Checkout, remote: str, branch: str, env: Mapping[str, str] | None) -> str | None:
    ref = INCOMING + branch
    try:
        return checkout.fetch_branch(remote, branch, ref, env)
    finally:
        if checkout.ref_exists(ref):
            checkout.delete_ref(ref)


def check_out_branch(checkout: Checkout, remote: str, branch: str, env: Mapping[str, str] | None = None) -> FollowUp:
    """Check out ``branch`` at the remote's tip (clean tree needed; a local copy only fast-forwards)."""
    checkout.start()  # refuses uncommitted changes to tracked files before anything moves
    tip = remote_tip(checkout, remote, branch, env)
    if tip is None:
        raise VcsError(f"the branch {branch} is not on {remote}")
    local = checkout.branch_tip(branch)
    if local is not None and local != tip and not checkout.is_ancestor(local, tip):
        raise VcsError(f"the local branch {branch} has commits that are not on {remote}",
                       hint=f"Push or move them first (git log {remote}/{branch}..{branch}); nothing was changed.")
    checkout.git("checkout", "-q", "-B", branch, tip)  # safe now: the local branch only moves forward
    return FollowUp(checkout, remote, branch, checkout.start(), env)


def commit_follow_up(follow: FollowUp, changes: ChangeSet, message: str, author: tuple[str, str],
                     committer: tuple[str, str]) -> str:
    """One commit of ``changes`` on top of the start (hooks are not run; the trailer marks it clovercode's)."""
    checkout = follow.checkout
    if checkout.resolve("HEAD") != follow.start.base or checkout.branch_tip(follow.branch) != follow.start.base:
        raise VcsError(f"HEAD or the branch {follow.branch} moved during the run; nothing was committed",
                       hint="The model's changes are still in the working tree.")
    return checkout.commit_tree(follow.start.base, changes.tree, message, author, committer)


def push_follow_up(follow: FollowUp, commit: str) -> None:
    """Push the follow-up if the remote branch is still where the run started; else BranchMoved."""
    now = remote_tip(follow.checkout, follow.remote, follow.branch, follow.env)
    if now != follow.start.base:
        raise BranchMoved(follow.branch, follow.start.base, now, commit)
    try:
        follow.checkout.push_fast_forward(follow.remote, follow.branch, follow.env)
    except VcsError as exc:  # moved between the fetch and the push: the remote refused the non-fast-forward
        if "rejected" in str(exc) or "fetch first" in str(exc) or "non-fast-forward" in str(exc):
            raise BranchMoved(follow.branch, follow.start.base, None, commit) from None
        raise


def keep_on_side_branch(follow: FollowUp, commit: str) -> str | None:
    """Push a refused follow-up to a new branch of its own (a new ref: nothing is replaced), so it
    outlives a CI runner; its name, or None if that push failed too (the commit is then only local)."""
    side = f"clovercode/follow-up/{follow.branch}-{commit[:8]}"
    if not valid_branch_name(side):
        return None
    try:
        follow.checkout.git("branch", "-f", side, commit)  # a local name for it; -f: a re-run of the same commit
        follow.checkout.push_fast_forward(follow.remote, side, follow.env)
    except VcsError:
        return None
    return side

"""Which commits moving a fix branch would drop, and whether clovercode made them.

The rule (docs/ci.md, "When the branch exists"): a commit is clovercode's own when its message
carries the trailer ``Clovercode-Tree: <sha>`` and that sha is the commit's own tree. clovercode
writes the trailer on every fix commit; an amended, rebased or hand-made commit no longer matches,
so it counts as someone else's. A commit would be dropped when it is reachable from the branch but
neither from the new base nor from any other ref (other branches, tags, remote-tracking branches
other than the branch's own copies); the trailer is read from the commit object, so the rule also
holds in a fresh CI clone that only has the branch from the remote.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clovercode.vcs.git import Checkout

TRAILER = "Clovercode-Tree"
BACKUP_PREFIX = "refs/clovercode/backup/"
INCOMING_PREFIX = "refs/clovercode/incoming/"  # a remote branch fetched only to be checked
_TRAILER_LINE = re.compile(rf"^{TRAILER}: ([0-9a-f]{{40}})\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    own: bool  # made by a clovercode fix run (the trailer matches the tree)

    def describe(self) -> str:
        return f"{self.sha[:12]} {self.subject}"


def with_trailer(message: str, tree: str) -> str:
    """``message`` with the ownership trailer as its last paragraph."""
    return message.rstrip("\n") + f"\n\n{TRAILER}: {tree}\n"


def dropped_commits(checkout: "Checkout", tip: str, new_base: str, branch: str) -> list[Commit]:
    """Commits reachable from ``tip`` that moving ``branch`` to ``new_base`` would leave on no ref, newest first."""
    out = checkout.git("rev-list", "--format=%T%x00%s%x00%B%x01", tip, "--not",
                       f"--exclude=refs/heads/{branch}", f"--exclude=refs/remotes/*/{branch}",
                       "--exclude=refs/clovercode/*", "--all", new_base)
    commits = []
    # `rev-list --format` prints "commit <sha>" then the formatted record, which ends at \x01
    for record in out.split("\x01"):
        record = record.strip("\n")
        if not record.startswith("commit "):
            continue
        header, _, rest = record.partition("\n")
        tree, subject, body = (rest.split("\0", 2) + ["", ""])[:3]
        match = _TRAILER_LINE.findall(body)
        commits.append(Commit(header.split()[1], subject, bool(match) and match[-1] == tree))
    return commits


def foreign(commits: list[Commit]) -> list[Commit]:
    return [c for c in commits if not c.own]


def backup_ref(checkout: "Checkout", label: str, sha: str, clock=time.gmtime) -> str:
    """Keep ``sha`` under refs/clovercode/backup/<label>/<UTC time>; returns the ref's name."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", clock())
    name, n = f"{BACKUP_PREFIX}{label}/{stamp}", 1
    while checkout.ref_exists(name):  # two moves within one second
        n += 1
        name = f"{BACKUP_PREFIX}{label}/{stamp}-{n}"
    checkout.git("update-ref", name, sha, "")
    return name


def refusal_hint(branch: str) -> str:
    return (f"clovercode never drops a commit it did not make. Pass --branch NEW-NAME to fix on another branch, "
            f"or --force to move {branch} anyway (the commits stay reachable from a backup ref under "
            f"{BACKUP_PREFIX}{branch}/).")

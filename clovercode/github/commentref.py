"""Which comment a URL names (pure): an issue comment, a pull-request review comment, or a review.

The URLs are the ones GitHub shows and puts in webhook payloads (``html_url``):

- ``https://github.com/OWNER/REPO/issues/7#issuecomment-123`` (``/pull/7#issuecomment-123`` too)
- ``https://github.com/OWNER/REPO/pull/7#discussion_r456`` (a review comment)
- ``https://github.com/OWNER/REPO/pull/7#pullrequestreview-789`` (a review)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clovercode.ground.errors import UsageError
from clovercode.github.refs import IssueRef, RepoRef

_URL = re.compile(r"\s*https?://[^/\s]+/(?P<owner>[A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))/(?P<repo>[A-Za-z0-9._-]{1,100})"
                  r"/(?P<where>issues|pull)/(?P<number>\d+)(?:/files)?"
                  r"#(?P<kind>issuecomment|discussion_r|pullrequestreview)-?(?P<id>\d+)\s*")
KINDS = {"issuecomment": "issue_comment", "discussion_r": "review_comment", "pullrequestreview": "review"}


@dataclass(frozen=True)
class CommentRef:
    issue: IssueRef  # the issue or pull request the comment is on
    kind: str  # "issue_comment" | "review_comment" | "review"
    id: int
    on_pull: bool  # the URL says /pull/ (an issue comment's URL may say /issues/ for a pull request too)


def parse_comment_url(text: str, source: str = "--github-comment") -> CommentRef:
    match = _URL.fullmatch(text)
    if not match or int(match.group("number")) < 1:
        raise UsageError(f"{source}: expected a comment's URL, like https://github.com/OWNER/REPO/issues/7#issuecomment-123, "
                         f"…/pull/7#discussion_r456 or …/pull/7#pullrequestreview-789; got {text!r}")
    kind = KINDS[match.group("kind")]
    on_pull = match.group("where") == "pull"
    if kind != "issue_comment" and not on_pull:
        raise UsageError(f"{source}: a review or review comment belongs to a pull request (…/pull/N#…), got {text!r}")
    repo = RepoRef(match.group("owner"), match.group("repo").removesuffix(".git"))
    return CommentRef(IssueRef(repo, int(match.group("number"))), kind, int(match.group("id")), on_pull)

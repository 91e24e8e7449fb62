"""Publish a review on GitHub: one review whose line comments sit on changed lines only, and a summary
that a later run updates instead of adding another.

The bot's summary carries :data:`MARKER` and each line comment a finding marker (its key), as HTML
comments GitHub does not show. A re-run finds the bot's own review (by login and marker), updates its
body, and adds line comments only for findings not already posted. Everything the model wrote is made
inert (trust/markdown.py): no mention, no closing keyword, no image or HTML, fences that hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from clovercode.github.client import GitHubClient
from clovercode.github.pulls import (PullInfo, create_review, create_review_comment, list_review_comments, list_reviews,
                                     update_review)
from clovercode.front.review.diffmap import DiffMap
from clovercode.front.review.findings import Finding
from clovercode.trust.markdown import code_span, fence, inert_markdown

MARKER = "<!-- clovercode-review -->"
FINDING_MARKER = re.compile(r"<!-- clovercode-finding:([0-9a-f]{16}) -->")
SUMMARY_MAX = 60_000  # GitHub refuses bodies over 65,536 characters


@dataclass
class Posted:
    review_id: int
    url: str
    action: str  # "created" | "updated"
    comments_added: int = 0
    comments_kept: int = 0  # already posted by an earlier run

    def to_json(self) -> dict[str, Any]:
        return {"id": self.review_id, "url": self.url, "action": self.action,
                "comments_added": self.comments_added, "comments_kept": self.comments_kept}


@dataclass
class Placement:
    inline: list[Finding] = field(default_factory=list)  # on lines the diff shows
    summary: list[Finding] = field(default_factory=list)  # anywhere else: in the review's body


def place(findings: list[Finding], diff: DiffMap) -> Placement:
    out = Placement()
    for finding in findings:
        target = out.inline if diff.commentable(finding.file, finding.start_line, finding.end_line) else out.summary
        target.append(finding)
    return out


def comment_body(finding: Finding) -> str:
    parts = [f"<!-- clovercode-finding:{finding.key} -->",
             f"**[{finding.severity}] {inert_markdown(' '.join(finding.title.split()))}**", "",
             inert_markdown(finding.body)]
    if finding.suggestion is not None:
        parts += ["", fence(finding.suggestion, "suggestion")]
    return "\n".join(parts)


def line_comment(finding: Finding) -> dict[str, Any]:
    comment: dict[str, Any] = {"path": finding.file, "line": finding.end_line, "side": "RIGHT",
                               "body": comment_body(finding)}
    if finding.start_line < finding.end_line:
        comment.update(start_line=finding.start_line, start_side="RIGHT")
    return comment


def summary_body(placement: Placement, overall: str | None, head: str) -> str:
    total = len(placement.inline) + len(placement.summary)
    lines = [MARKER, "## clovercode review", "",
             f"Reviewed {code_span(head[:12])}: {total} finding{'s' if total != 1 else ''}"
             f" ({len(placement.inline)} on changed lines, {len(placement.summary)} elsewhere)."]
    if overall:
        lines += ["", inert_markdown(overall.strip())]
    if placement.summary:
        lines += ["", "### Findings outside the changed lines", ""]
        for f in placement.summary:
            where = code_span(f"{f.file}:{f.start_line}" + (f"-{f.end_line}" if f.end_line != f.start_line else ""))
            text = " ".join(f"{f.title} — {f.body}".split())
            lines.append(f"- **{f.severity}** {where}: {inert_markdown(text)}")
    lines += ["", "<sub>Updated on each push; line comments from earlier runs are kept, not repeated.</sub>"]
    body = "\n".join(lines)
    return body if len(body) <= SUMMARY_MAX else body[:SUMMARY_MAX] + "\n\n[… cut]"


def publish_review(client: GitHubClient, pull: PullInfo, placement: Placement, overall: str | None,
                   bot_login: str) -> Posted:
    """Create the review, or update the bot's earlier one and add the line comments it lacks."""
    mine = lambda c: c.login.lower() == bot_login.lower()  # noqa: E731 - someone else's marker means nothing
    earlier = [r for r in list_reviews(client, pull.ref) if mine(r) and MARKER in r.body]
    posted = {key for c in list_review_comments(client, pull.ref) if mine(c) for key in FINDING_MARKER.findall(c.body)}
    new = [f for f in placement.inline if f.key not in posted]
    kept = len(placement.inline) - len(new)
    body = summary_body(placement, overall, pull.head_sha)
    if not earlier:
        review = create_review(client, pull.ref, pull.head_sha, body, [line_comment(f) for f in new])
        return Posted(review.id, review.url, "created", len(new), kept)
    review = update_review(client, pull.ref, earlier[-1].id, body)
    for finding in new:
        create_review_comment(client, pull.ref, pull.head_sha, line_comment(finding))
    return Posted(review.id, review.url, "updated", len(new), kept)

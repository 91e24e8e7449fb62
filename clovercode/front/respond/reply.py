"""What `respond` writes: the follow-up's commit message and its reply in the thread, both inert (the
model's summary and the comment are untrusted: no mention — a reply that said "@clovercode" would
start the bot again —, no closing keyword, no image or HTML)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clovercode.fixflow.report import tests_line, wrap
from clovercode.fixflow.rounds import Rounds
from clovercode.fixflow.testrun import TestCommand
from clovercode.fixflow.verdict import Conclusion
from clovercode.github.client import GitHubClient
from clovercode.github.pulls import Comment, create_issue_comment, reply_to_review_comment
from clovercode.github.refs import IssueRef
from clovercode.trust.markdown import code_span, inert_markdown, inert_text

if TYPE_CHECKING:
    from clovercode.front.respond.command import RespondOutcome


def commit_message(out: "RespondOutcome", rounds: Rounds, tests: TestCommand | None, concluded: Conclusion) -> str:
    summary = (rounds.summary or "The model gave no summary.").strip()
    first = " ".join(summary.splitlines()[0].split())
    subject = inert_text(f"Follow-up: {first}")[:72]
    where = out.comment.url if out.comment else ""
    body = [subject, "", inert_text(summary), "", wrap(f"Requested in {where}") if where else "",
            tests_line(tests, rounds.tests), f"Outcome: {concluded.outcome} ({inert_text(concluded.reason)})."]
    return "\n".join(part for part in body if part is not None).strip() + "\n"


def reply_body(out: "RespondOutcome") -> str:
    lines: list[str] = []
    if out.commit and out.pushed:
        lines.append(f"Pushed {code_span(out.commit[:12])} to {code_span(out.branch or '')}.")
    elif out.commit:
        lines.append(f"Nothing was pushed: {inert_markdown(out.detail)}")
    elif out.status == "no_change":
        lines.append("No change was needed, or none was made.")
    else:
        lines.append(f"No follow-up commit: {inert_markdown(out.detail)}")
    if out.changed:
        lines.append("Changed: " + ", ".join(code_span(p) for p in out.changed[:20]))
    if out.left_out:
        lines.append("Not committed: " + ", ".join(inert_markdown(p) for p in out.left_out[:20]))
    if out.outcome:
        lines.append(f"Verdict: **{out.outcome}**.")
    if out.clean is not None:
        lines.append(f"Clean checkout: {inert_markdown(out.clean.describe())}.")
    if out.summary:
        lines += ["", inert_markdown(out.summary.strip())]
    return "\n".join(lines)


def post_reply(client: GitHubClient, issue: IssueRef, comment: Comment, text: str) -> Comment:
    """In the thread: under a review comment (its first comment), else on the pull request or issue."""
    if comment.kind == "review_comment":
        return reply_to_review_comment(client, issue, comment.in_reply_to or comment.id, text)
    return create_issue_comment(client, issue, text)

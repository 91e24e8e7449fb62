"""Should `respond` act on this comment at all? (pure)

Only on a new comment (not an edit), that mentions the bot, by someone the user trusts (a GitHub
author_association listed in github.trusted_associations, which no project file can set), and never
on the bot's own comments or any bot's: a reply that quotes the mention must not start another run.
"""

from __future__ import annotations

from typing import Iterable

from clovercode.github.pulls import Comment

ACTING_EVENTS = ("created", "submitted")  # issue_comment / review_comment created; pull_request_review submitted


def refusal(comment: Comment, *, bot_login: str, mention: str, trusted: Iterable[str], action: str | None) -> str | None:
    """None to act; else why not, as one line for the log."""
    who = f"{comment.login or 'someone'} ({comment.association or 'no association'})"
    if action is not None and action not in ACTING_EVENTS:
        return f"ignored: the event is '{action}', not a new comment (edits never start a run)"
    if comment.login.lower() == bot_login.lower() or comment.user_type == "Bot":
        return f"ignored: the comment is by {comment.login or 'a bot'}, a bot (no loops)"
    if comment.association.upper() not in {t.upper() for t in trusted}:
        return f"ignored: {who} is not trusted (github.trusted_associations)"
    if mention.lower() not in comment.body.lower():
        return f"ignored: the comment by {who} does not mention {mention}"
    return None

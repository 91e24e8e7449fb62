"""The GitHub operations `review` and `respond` need: a pull request, its reviews and review comments,
issue comments, and replies. Everything read here was written by someone else: callers treat the
text as untrusted (trust/markdown.py on the way out, fenced in the model's task on the way in)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clovercode.github.client import GitHubClient, GitHubError
from clovercode.github.refs import IssueRef, RepoRef


@dataclass(frozen=True)
class PullInfo:
    ref: IssueRef
    title: str
    body: str
    url: str
    head_ref: str
    head_sha: str
    head_repo: str  # OWNER/REPO the head branch lives in ('' when the fork is gone)
    base_ref: str
    draft: bool = False

    @property
    def from_fork(self) -> bool:
        return self.head_repo.lower() != str(self.ref.repo).lower()


@dataclass(frozen=True)
class Comment:
    """An issue comment, a pull-request review comment or a review (``kind``)."""

    kind: str  # "issue_comment" | "review_comment" | "review"
    id: int
    body: str
    login: str
    user_type: str  # "User" | "Bot" | "Organization"
    association: str  # OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR, NONE …
    url: str
    path: str = ""  # review comments: the file and line they sit on, and the hunk around it
    line: int | None = None
    diff_hunk: str = ""
    in_reply_to: int | None = None


def repo_path(repo: RepoRef, rest: str = "") -> str:
    return f"/repos/{repo.owner}/{repo.name}{rest}"


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def get_pull(client: GitHubClient, ref: IssueRef) -> PullInfo:
    data = client.request("GET", repo_path(ref.repo, f"/pulls/{ref.number}")).object()
    head, base = data.get("head") or {}, data.get("base") or {}
    head_repo = (head.get("repo") or {}) if isinstance(head, dict) else {}
    if not isinstance(head, dict) or not _text(head, "sha") or not _text(head, "ref"):
        raise GitHubError(f"GitHub's answer about pull request {ref} has no head branch")
    return PullInfo(ref, _text(data, "title"), _text(data, "body"), _text(data, "html_url"), _text(head, "ref"),
                    _text(head, "sha"), _text(head_repo, "full_name") if isinstance(head_repo, dict) else "",
                    _text(base, "ref") if isinstance(base, dict) else "", bool(data.get("draft")))


def issue_is_pull(client: GitHubClient, ref: IssueRef) -> bool:
    """Does issue number ``ref`` belong to a pull request (every pull request is an issue too)?"""
    data = client.request("GET", repo_path(ref.repo, f"/issues/{ref.number}")).object()
    return bool(data.get("pull_request"))


def _comment(kind: str, data: dict[str, Any]) -> Comment:
    user = data.get("user") if isinstance(data.get("user"), dict) else {}
    number = data.get("id")
    if not isinstance(number, int):
        raise GitHubError(f"GitHub's answer about a {kind.replace('_', ' ')} has no id")
    line = data.get("line") if isinstance(data.get("line"), int) else None
    reply = data.get("in_reply_to_id") if isinstance(data.get("in_reply_to_id"), int) else None
    return Comment(kind, number, _text(data, "body"), _text(user, "login"), _text(user, "type"),
                   _text(data, "author_association"), _text(data, "html_url"), _text(data, "path"), line,
                   _text(data, "diff_hunk"), reply)


def get_comment(client: GitHubClient, repo: RepoRef, kind: str, number: int, pull: int | None = None) -> Comment:
    if kind == "issue_comment":
        path = f"/issues/comments/{number}"
    elif kind == "review_comment":
        path = f"/pulls/comments/{number}"
    else:
        path = f"/pulls/{pull}/reviews/{number}"
    return _comment(kind, client.request("GET", repo_path(repo, path)).object())


def list_issue_comments(client: GitHubClient, ref: IssueRef, limit: int = 30) -> list[Comment]:
    items = client.request("GET", repo_path(ref.repo, f"/issues/{ref.number}/comments"),
                           query={"per_page": min(limit, 100)}).objects()
    return [_comment("issue_comment", item) for item in items]


def list_reviews(client: GitHubClient, ref: IssueRef) -> list[Comment]:
    items = client.request("GET", repo_path(ref.repo, f"/pulls/{ref.number}/reviews"), query={"per_page": 100}).objects()
    return [_comment("review", item) for item in items]


def list_review_comments(client: GitHubClient, ref: IssueRef) -> list[Comment]:
    items = client.request("GET", repo_path(ref.repo, f"/pulls/{ref.number}/comments"), query={"per_page": 100}).objects()
    return [_comment("review_comment", item) for item in items]


def create_review(client: GitHubClient, ref: IssueRef, commit: str, body: str,
                  comments: list[dict[str, Any]]) -> Comment:
    """One submitted review (event COMMENT: never an approval nor a change request) with line comments."""
    payload: dict[str, Any] = {"commit_id": commit, "body": body, "event": "COMMENT"}
    if comments:
        payload["comments"] = comments
    return _comment("review", client.request("POST", repo_path(ref.repo, f"/pulls/{ref.number}/reviews"),
                                             body=payload).object())


def update_review(client: GitHubClient, ref: IssueRef, review: int, body: str) -> Comment:
    return _comment("review", client.request("PUT", repo_path(ref.repo, f"/pulls/{ref.number}/reviews/{review}"),
                                             body={"body": body}).object())


def create_review_comment(client: GitHubClient, ref: IssueRef, commit: str, comment: dict[str, Any]) -> Comment:
    return _comment("review_comment", client.request("POST", repo_path(ref.repo, f"/pulls/{ref.number}/comments"),
                                                     body={**comment, "commit_id": commit}).object())


def create_issue_comment(client: GitHubClient, ref: IssueRef, body: str) -> Comment:
    return _comment("issue_comment", client.request("POST", repo_path(ref.repo, f"/issues/{ref.number}/comments"),
                                                    body={"body": body}).object())


def reply_to_review_comment(client: GitHubClient, ref: IssueRef, comment: int, body: str) -> Comment:
    return _comment("review_comment", client.request(
        "POST", repo_path(ref.repo, f"/pulls/{ref.number}/comments/{comment}/replies"), body={"body": body}).object())

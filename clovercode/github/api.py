"""The GitHub operations `fix` needs: read an issue, open or update the one pull request of a branch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clovercode.github.client import GitHubClient, GitHubError, Response
from clovercode.github.refs import IssueRef, RepoRef, graphql_url


@dataclass(frozen=True)
class GitHubIssue:
    ref: IssueRef
    title: str
    body: str
    url: str


@dataclass(frozen=True)
class PullRequest:
    number: int
    url: str
    draft: bool
    node_id: str
    action: str = ""  # "created" | "updated" once published

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number, "url": self.url, "draft": self.draft, "action": self.action}


@dataclass(frozen=True)
class PullSpec:
    """What the pull request should look like; ``head`` is 'branch' or 'owner:branch' for forks."""

    repo: RepoRef
    head: str
    base: str
    title: str
    body: str
    draft: bool


def _path(repo: RepoRef, rest: str = "") -> str:
    return f"/repos/{repo.owner}/{repo.name}{rest}"


def fetch_issue(client: GitHubClient, ref: IssueRef) -> GitHubIssue:
    data = client.request("GET", _path(ref.repo, f"/issues/{ref.number}")).object()
    if data.get("pull_request"):
        raise GitHubError(f"{ref} is a pull request, not an issue", hint="Pass the number of an issue.")
    return GitHubIssue(ref, str(data.get("title") or ""), str(data.get("body") or ""), str(data.get("html_url") or ""))


def default_branch(client: GitHubClient, repo: RepoRef) -> str:
    data = client.request("GET", _path(repo)).object()
    branch = data.get("default_branch")
    if not branch:
        raise GitHubError(f"GitHub did not say which branch is the default of {repo}", hint="Pass --base BRANCH.")
    return str(branch)


def find_open_pull(client: GitHubClient, repo: RepoRef, head_owner: str, branch: str) -> PullRequest | None:
    """The open pull request whose head is ``head_owner:branch``, if any."""
    items = client.request("GET", _path(repo, "/pulls"),
                           query={"state": "open", "head": f"{head_owner}:{branch}", "per_page": 10}).objects()
    for item in items:
        head = item.get("head")
        if isinstance(head, dict) and head.get("ref") == branch:
            return _pull(item)
    return None


def _pull(answer: Response | dict[str, Any], action: str = "") -> PullRequest:
    data = answer.object() if isinstance(answer, Response) else answer
    number = data.get("number")
    if not isinstance(number, int):
        raise GitHubError(f"GitHub's answer about a pull request has no number: {str(data)[:200]}")
    return PullRequest(number, str(data.get("html_url") or ""), bool(data.get("draft")),
                       str(data.get("node_id") or ""), action)


def publish_pull(client: GitHubClient, spec: PullSpec) -> PullRequest:
    """Open the pull request for ``spec.head``, or update the open one: never a second for the same branch."""
    head_owner, _, branch = spec.head.rpartition(":")
    head_owner = head_owner or spec.repo.owner
    existing = find_open_pull(client, spec.repo, head_owner, branch)
    if existing is None:
        body = {"title": spec.title, "head": spec.head, "base": spec.base, "body": spec.body, "draft": spec.draft}
        try:
            return _pull(client.request("POST", _path(spec.repo, "/pulls"), body=body), "created")
        except GitHubError as exc:
            if exc.status != 422 or not any("already exists" in str(e.get("message", "")) for e in exc.errors):
                raise
        # Opened meanwhile (or the list lagged behind): update that one instead.
        existing = find_open_pull(client, spec.repo, head_owner, branch)
        if existing is None:
            raise GitHubError(f"GitHub says a pull request for {spec.head} already exists, but it cannot be found",
                              hint="Check the repository's open pull requests.")
    update = {"title": spec.title, "body": spec.body, "base": spec.base}
    pull = _pull(client.request("PATCH", _path(spec.repo, f"/pulls/{existing.number}"), body=update), "updated")
    if pull.draft != spec.draft:
        pull = set_draft(client, pull, spec.draft)
    return pull


_DRAFT_MUTATIONS = {
    True: "mutation($id: ID!) { convertPullRequestToDraft(input: {pullRequestId: $id}) { pullRequest { isDraft } } }",
    False: "mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft } } }",
}


def set_draft(client: GitHubClient, pull: PullRequest, draft: bool) -> PullRequest:
    """REST cannot change the draft state of a pull request; GraphQL can."""
    answer = client.request("POST", "", url=graphql_url(client.api_url),
                            body={"query": _DRAFT_MUTATIONS[draft], "variables": {"id": pull.node_id}}).object()
    if answer.get("errors"):
        messages = "; ".join(str(e.get("message")) for e in answer["errors"] if isinstance(e, dict))
        raise GitHubError(f"could not mark pull request #{pull.number} as {'draft' if draft else 'ready for review'}: {messages}")
    return PullRequest(pull.number, pull.url, draft, pull.node_id, pull.action)

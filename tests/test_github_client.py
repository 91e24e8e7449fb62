"""The GitHub client against a local server that checks requests against GitHub's API description."""

from __future__ import annotations

import socket

import pytest
from fake_github import fake_github, github_api  # noqa: F401 - fixtures

from clovercode.ground.errors import ExitCode, UsageError
from clovercode.github.api import PullSpec, fetch_issue, publish_pull
from clovercode.github.client import GitHubClient, GitHubError, http_error
from clovercode.github.refs import (IssueRef, RepoRef, find_token, graphql_url, issue_reference, parse_issue,
                                    parse_repo, repo_from_remote_url)

TOKEN = "ghs_valid_token"
REPO = RepoRef("octo", "calc")


@pytest.fixture
def github(fake_github):  # noqa: F811
    fake_github.add_repo("octo/calc")
    fake_github.add_issue("octo/calc", 3, "mean() is wrong", "mean([1, 2]) is 1")
    fake_github.add_issue("octo/calc", 4, "a pull request", "", pull_request=True)
    return fake_github


def spec(**changes) -> PullSpec:
    values = dict(repo=REPO, head="clovercode/3-mean", base="main", title="Fix #3", body="Fixes #3", draft=False)
    values.update(changes)
    return PullSpec(**values)


def test_fetch_issue(github):
    issue = fetch_issue(GitHubClient(github.url, TOKEN), IssueRef(REPO, 3))
    assert (issue.title, issue.body, issue.url) == ("mean() is wrong", "mean([1, 2]) is 1", "https://github.com/octo/calc/issues/3")
    [request] = github.requests
    assert request.headers["x-github-api-version"] == "2022-11-28" and request.headers["user-agent"].startswith("clovercode/")
    assert github.violations == []


def test_public_issue_without_a_token_and_pull_requests_refused(github):
    client = GitHubClient(github.url, None)
    assert fetch_issue(client, IssueRef(REPO, 3)).title == "mean() is wrong"
    assert "authorization" not in github.requests[0].headers
    with pytest.raises(GitHubError, match="is a pull request"):
        fetch_issue(client, IssueRef(REPO, 4))


def test_missing_issue_is_404_with_a_hint(github):
    with pytest.raises(GitHubError) as err:
        fetch_issue(GitHubClient(github.url, TOKEN), IssueRef(REPO, 99))
    assert err.value.status == 404 and "404 Not Found" in err.value.message and "permission" in (err.value.hint or "")
    assert err.value.exit_code == ExitCode.VCS_ERROR


def test_bad_credentials(github):
    with pytest.raises(GitHubError) as err:
        fetch_issue(GitHubClient(github.url, "ghs_expired"), IssueRef(REPO, 3))
    assert err.value.status == 401 and "Bad credentials" in err.value.message and "GITHUB_TOKEN" in err.value.hint


def test_primary_rate_limit_says_when_it_resets(github):
    github.fail_next("GET", "/issues/3", "rate_limit")
    with pytest.raises(GitHubError) as err:
        fetch_issue(GitHubClient(github.url, TOKEN), IssueRef(REPO, 3))
    assert err.value.status == 403 and "rate limit" in err.value.message
    assert "resets at" in err.value.hint and "5000 of 5000 used" in err.value.hint and "about 30 min" in err.value.hint


def test_secondary_rate_limit_says_how_long_to_wait(github):
    github.fail_next("GET", "/issues/3", "secondary_rate_limit")
    with pytest.raises(GitHubError) as err:
        fetch_issue(GitHubClient(github.url, TOKEN), IssueRef(REPO, 3))
    assert "secondary rate limit" in err.value.message and "wait 60 s" in err.value.hint


def test_unreachable_api_is_a_clear_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket is closed
    with pytest.raises(GitHubError, match=f"cannot reach the GitHub API at http://127.0.0.1:{port}") as err:
        fetch_issue(GitHubClient(f"http://127.0.0.1:{port}", TOKEN, timeout=5), IssueRef(REPO, 3))
    assert "github.api_url" in err.value.hint


def test_publish_creates_then_updates_and_toggles_draft(github):
    github.bare_repo = None
    client = GitHubClient(github.url, TOKEN)
    first = publish_pull(client, spec(draft=True))
    assert (first.number, first.draft, first.action) == (1, True, "created")
    second = publish_pull(client, spec(title="Fix #3 again", draft=False))
    assert (second.number, second.draft, second.action) == (1, False, "updated")
    assert len(github.pulls) == 1 and github.pulls[0].title == "Fix #3 again" and github.pulls[0].draft is False
    [graphql] = [r for r in github.requests if r.path == "/graphql"]
    assert "markPullRequestReadyForReview" in graphql.body["query"] and graphql.body["variables"] == {"id": first.node_id}
    assert github.violations == []


def test_fork_heads_are_namespaced(github):
    github.bare_repo = None
    pull = publish_pull(GitHubClient(github.url, TOKEN), spec(head="forker:clovercode/3-mean"))
    assert pull.action == "created"
    assert github.calls("pulls/list")[0].query["head"] == ["forker:clovercode/3-mean"]
    assert github.calls("pulls/create")[0].body["head"] == "forker:clovercode/3-mean"


def test_validation_errors_are_spelled_out():
    err = http_error("POST /repos/o/r/pulls", 422, {"message": "Validation Failed", "errors": [
        {"resource": "PullRequest", "field": "base", "code": "invalid"}]}, {}, True)
    assert err.message == "POST /repos/o/r/pulls: GitHub answered 422 Validation Failed (PullRequest.base invalid)"


def test_refs():
    assert parse_issue("octo/calc#42") == IssueRef(REPO, 42)
    assert parse_issue("https://github.com/octo/calc/issues/42") == IssueRef(REPO, 42)
    for bad in ("octo/calc", "octo#4", "octo/calc#0", "-x/calc#1", "a/b/c#1"):
        with pytest.raises(UsageError, match="OWNER/REPO#NUMBER"):
            parse_issue(bad)
    assert parse_repo("octo/calc.git") == REPO
    assert repo_from_remote_url("git@github.com:octo/calc.git") == REPO
    assert repo_from_remote_url("https://x-access-token:abc@github.example.com/octo/calc") == REPO
    assert repo_from_remote_url("ssh://git@github.com/octo/calc.git") == REPO
    assert repo_from_remote_url("file:///tmp/origin.git") is None
    assert repo_from_remote_url("/srv/git/calc.git") is None
    assert graphql_url("https://api.github.com") == "https://api.github.com/graphql"
    assert graphql_url("https://ghe.example.com/api/v3/") == "https://ghe.example.com/api/graphql"
    assert find_token({"GH_TOKEN": "b"}) == "b" and find_token({"GITHUB_TOKEN": "a", "GH_TOKEN": "b"}) == "a"
    assert find_token({"GITHUB_TOKEN": " "}) is None
    assert issue_reference(IssueRef(REPO, 7), RepoRef("Octo", "Calc")) == "#7"
    assert issue_reference(IssueRef(REPO, 7), RepoRef("other", "calc")) == "octo/calc#7"


def test_the_fake_holds_requests_to_the_published_schema(github):
    """The checks can fail: fields and parameters GitHub does not document are caught."""
    client = GitHubClient(github.url, TOKEN)
    with pytest.raises(GitHubError) as err:
        client.request("POST", "/repos/octo/calc/pulls", body={"title": "t", "head": "h", "base": "main", "labels": ["bug"]})
    assert err.value.status == 422
    with pytest.raises(GitHubError):
        client.request("GET", "/repos/octo/calc/pulls", query={"state": "opened"})
    with pytest.raises(GitHubError):
        client.request("PATCH", "/repos/octo/calc/pulls/1", body={"draft": True})  # REST cannot change draft
    assert len(github.violations) == 3
    assert "'labels' was unexpected" in github.violations[0]
    assert "'opened' is not one of" in github.violations[1]
    assert "'draft' was unexpected" in github.violations[2]


class _Answer:
    """A stand-in for urlopen's answer: status 200 with a fixed body."""

    def __init__(self, body: bytes):
        self.body, self.status, self.headers = body, 200, {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def read(self) -> bytes:
        return self.body


@pytest.mark.parametrize("body", [b"[1, 2]", b'"text"', b"42"])
def test_an_answer_of_the_wrong_shape_is_a_clear_error(body):
    client = GitHubClient("https://ghe.example/api/v3", TOKEN, opener=lambda request, timeout: _Answer(body))
    with pytest.raises(GitHubError, match="GitHub's answer is not an object"):
        fetch_issue(client, IssueRef(REPO, 3))
    with pytest.raises(GitHubError, match="GitHub's answer is not a list"):
        publish_pull(client, spec())
    client = GitHubClient("https://ghe.example/api/v3", TOKEN, opener=lambda request, timeout: _Answer(b"[]"))
    with pytest.raises(GitHubError, match="not an object"):  # the list is fine, the created pull request is not
        publish_pull(client, spec())


def test_an_api_url_that_is_no_url_is_a_usage_error():
    for bad in ("notaurl", "ftp://example.org", "https://"):
        with pytest.raises(UsageError, match="github.api_url: expected an http"):
            GitHubClient(bad, TOKEN)

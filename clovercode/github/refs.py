"""Names on GitHub: OWNER/REPO#N, repositories in remote URLs, the token, API addresses (pure)."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

from clovercode.ground.errors import UsageError

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"
_REPO = r"[A-Za-z0-9._-]{1,100}"
TOKEN_VARS = ("GITHUB_TOKEN", "GH_TOKEN")
# Never handed to the model's commands or the project's tests: a test that writes one into a
# committed file would publish it with the push.
SECRET_VARS = frozenset({*TOKEN_VARS, "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN", "CLOVERCODE_API_KEY",
                         "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN"})


@dataclass(frozen=True)
class RepoRef:
    owner: str
    name: str

    def __str__(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass(frozen=True)
class IssueRef:
    repo: RepoRef
    number: int

    def __str__(self) -> str:
        return f"{self.repo}#{self.number}"


def parse_repo(text: str, source: str = "--github-repo") -> RepoRef:
    match = re.fullmatch(rf"\s*({_NAME})/({_REPO})\s*", text)
    if not match or match.group(2) in (".", ".."):
        raise UsageError(f"{source}: expected OWNER/REPO, got {text!r}")
    return RepoRef(match.group(1), match.group(2).removesuffix(".git"))


def parse_issue(text: str, source: str = "--github-issue") -> IssueRef:
    """'OWNER/REPO#N' (or an issue's https URL) -> IssueRef."""
    url = re.fullmatch(rf"\s*https?://[^/\s]+/({_NAME})/({_REPO})/issues/(\d+)/?\s*", text)
    match = url or re.fullmatch(rf"\s*({_NAME})/({_REPO})#(\d+)\s*", text)
    if not match or int(match.group(3)) < 1:
        raise UsageError(f"{source}: expected OWNER/REPO#NUMBER (e.g. octocat/hello-world#42), got {text!r}")
    return IssueRef(RepoRef(match.group(1), match.group(2)), int(match.group(3)))


def repo_from_remote_url(url: str) -> RepoRef | None:
    """OWNER/REPO from a GitHub-style remote URL (https, ssh, scp-like); None for anything else."""
    url = url.strip()
    scp = re.fullmatch(r"[^@/\s]+@[^:/\s]+:(.+)", url)  # git@github.com:owner/repo.git
    if scp:
        path = scp.group(1)
    else:
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http", "ssh", "git") or not parts.hostname:
            return None
        path = parts.path
    pieces = [p for p in path.strip("/").split("/") if p]
    if len(pieces) != 2:
        return None
    try:
        return parse_repo("/".join(pieces), "remote URL")
    except UsageError:
        return None


def find_token(env: Mapping[str, str]) -> str | None:
    for name in TOKEN_VARS:
        if env.get(name, "").strip():
            return env[name].strip()
    return None


def graphql_url(api_url: str) -> str:
    """api.github.com -> /graphql; GitHub Enterprise's https://HOST/api/v3 -> https://HOST/api/graphql."""
    base = api_url.rstrip("/")
    if base.endswith("/api/v3"):
        return base[: -len("/v3")] + "/graphql"
    return base + "/graphql"


def issue_reference(issue: IssueRef, target: RepoRef) -> str:
    """'#42' within the same repository, 'owner/repo#42' across repositories (both close the issue on merge)."""
    same = (issue.repo.owner.lower(), issue.repo.name.lower()) == (target.owner.lower(), target.name.lower())
    return f"#{issue.number}" if same else str(issue)


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in SECRET_VARS}


def push_auth_env(push_url: str, api_url: str, token: str) -> dict[str, str]:
    """Environment that makes ``git push`` to ``push_url`` authenticate with ``token`` (the header
    actions/checkout uses), given through GIT_CONFIG_* so it is neither in .git/config nor in argv.
    Empty when ``push_url`` is not https on the GitHub host that ``api_url`` belongs to."""
    push, api = urlsplit(push_url), urlsplit(api_url)
    if push.scheme != "https" or not push.hostname or not api.hostname:
        return {}
    api_host = "github.com" if api.hostname == "api.github.com" else api.hostname
    if push.hostname.lower() != api_host.lower():
        return {}
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"http.https://{push.hostname}/.extraheader",
            "GIT_CONFIG_VALUE_0": f"AUTHORIZATION: basic {basic}"}

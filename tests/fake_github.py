"""A GitHub REST API stand-in on 127.0.0.1 for tests.

Every request is checked against GitHub's published OpenAPI description (query parameters and JSON
bodies); a request that breaks it is recorded in ``violations`` and answered 422 the way GitHub
answers invalid input. Answers are built from the description's own examples, completed to their
schema and checked against it too. Errors look like GitHub's: 401 Bad credentials, 404, 422
"A pull request already exists", and rate limits (403 with x-ratelimit-remaining: 0 and a reset time,
or a secondary limit with retry-after). Pull requests' reviews, review comments, issue comments and
replies are served by the ReviewsFake mixin (tests/fake_github_reviews.py).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from fake_github_reviews import ReviewsFake
from openapi_check import OpenApi, Operation, complete

DOCS = "https://docs.github.com/rest"
API_VERSIONS = {"2022-11-28", "2026-03-10"}
RATE_LIMIT = 5000


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    status: int = 0
    operation: str = ""


@dataclass
class Pull:
    number: int
    repo: str
    title: str
    body: str
    head: str  # branch name
    head_owner: str
    base: str
    draft: bool
    state: str = "open"

    @property
    def node_id(self) -> str:
        return f"PR_kwfake{self.number:04d}"


@dataclass
class Failure:
    method: str
    path_suffix: str
    kind: str  # rate_limit | secondary_rate_limit | server_error | bad_credentials
    times: int = 1


@dataclass
class FakeGitHub(ReviewsFake):
    api: OpenApi
    tokens: set[str] = field(default_factory=lambda: {"ghs_valid_token"})
    bare_repo: Path | None = None  # when set, pull request heads and bases must exist there
    repos: dict[str, dict[str, Any]] = field(default_factory=dict)
    pulls: list[Pull] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    list_lags: int = 0  # the next N pull lists miss existing pull requests (GitHub's lists lag behind writes)
    remaining: int = RATE_LIMIT
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    # -- set-up ---------------------------------------------------------------------------------
    def add_repo(self, full_name: str, default_branch: str = "main") -> None:
        self.repos[full_name] = {"default_branch": default_branch, "issues": {}}

    def add_issue(self, full_name: str, number: int, title: str, body: str, *, pull_request: bool = False) -> None:
        self.repos[full_name]["issues"][number] = {"title": title, "body": body, "pull_request": pull_request}

    def fail_next(self, method: str, path_suffix: str, kind: str, times: int = 1) -> None:
        self.failures.append(Failure(method, path_suffix, kind, times))

    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, headers, body = fake.handle(self.command, self.path, dict(self.headers.items()), raw)
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self.url

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # -- answering ------------------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], Any]:
        with self._lock:
            parts = urlsplit(raw_path)
            request = Request(method, parts.path, parse_qs(parts.query, keep_blank_values=True),
                              {k.lower(): v for k, v in headers.items()}, None)
            self.requests.append(request)
            status, extra, body = self._answer(request, raw)
            request.status = status
            return status, {**self._rate_headers(), **extra}, body

    def _answer(self, request: Request, raw: bytes) -> tuple[int, dict[str, str], Any]:
        problems = self._header_problems(request.headers)
        if problems:
            self.violations += problems
            return 400, {}, _error(problems[0])
        if raw:
            try:
                request.body = json.loads(raw)
            except json.JSONDecodeError:
                self.violations.append(f"{request.method} {request.path}: body is not JSON")
                return 400, {}, _error("Problems parsing JSON")
        auth = self._auth(request)
        if auth is not None:
            return auth
        if request.path == "/graphql" and request.method == "POST":
            return self._graphql(request)
        op = self.api.operation(request.method, request.path)
        if op is None:
            self.violations.append(f"{request.method} {request.path}: no such endpoint in GitHub's API")
            return 404, {}, _error("Not Found", "404")
        request.operation = op.id
        problems = self.api.check_request(op, request.query, request.body)
        if problems:
            self.violations += [f"{op.id}: {p}" for p in problems]
            return 422, {}, {"message": "Invalid request.\n\n" + "\n".join(problems), "documentation_url": DOCS, "status": "422"}
        failure = self._failure(request)
        if failure is not None:
            return failure
        self.remaining -= 1
        if self.remaining < 0:
            self.remaining = 0
            return self._rate_limited()
        status, body = self._dispatch(op, request)
        answer_problems = self.api.check_response(op, status, body) if status < 400 or status == 422 else []
        self.violations += [f"the fake's own {status} answer to {op.id}: {p}" for p in answer_problems]
        return status, {}, body

    def _header_problems(self, headers: dict[str, str]) -> list[str]:
        problems = []
        if not headers.get("user-agent"):
            problems.append("no User-Agent header (GitHub rejects such requests)")
        if "application/vnd.github+json" not in headers.get("accept", ""):
            problems.append("Accept should be application/vnd.github+json")
        version = headers.get("x-github-api-version")
        if version is not None and version not in API_VERSIONS:
            problems.append(f"unsupported X-GitHub-Api-Version {version}")
        return problems

    def _auth(self, request: Request) -> tuple[int, dict[str, str], Any] | None:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if header and (scheme.lower() not in ("bearer", "token") or token not in self.tokens):
            return 401, {}, _error("Bad credentials", "401")
        if not header and (request.method != "GET" or request.path == "/graphql"):
            return 401, {}, _error("Requires authentication", "401")
        return None

    def _failure(self, request: Request) -> tuple[int, dict[str, str], Any] | None:
        for failure in self.failures:
            if failure.times > 0 and failure.method == request.method and request.path.endswith(failure.path_suffix):
                failure.times -= 1
                if failure.kind == "rate_limit":
                    self.remaining = 0
                    return self._rate_limited()
                if failure.kind == "secondary_rate_limit":
                    return 403, {"retry-after": "60"}, _error(
                        "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.", "403")
                if failure.kind == "bad_credentials":
                    return 401, {}, _error("Bad credentials", "401")
                return 502, {}, _error("Server Error", "502")
        return None

    def _rate_limited(self) -> tuple[int, dict[str, str], Any]:
        return 403, {}, {"message": "API rate limit exceeded for installation ID 1.",
                         "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
                         "status": "403"}

    def _rate_headers(self) -> dict[str, str]:
        reset = int(time.time()) + 1800
        return {"x-ratelimit-limit": str(RATE_LIMIT), "x-ratelimit-remaining": str(max(0, self.remaining)),
                "x-ratelimit-used": str(RATE_LIMIT - max(0, self.remaining)), "x-ratelimit-reset": str(reset),
                "x-ratelimit-resource": "core", "x-github-api-version-selected": "2022-11-28"}

    # -- the endpoints clovercode uses ----------------------------------------------------------
    def _dispatch(self, op: Operation, request: Request) -> tuple[int, Any]:
        segments = request.path.strip("/").split("/")
        full = f"{segments[1]}/{segments[2]}"
        repo = self.repos.get(full)
        if repo is None:
            return 404, _error("Not Found", "404")
        handler = getattr(self, "_op_" + op.id.replace("/", "_").replace("-", "_"), None)
        if handler is None:
            self.violations.append(f"{op.id}: the fake does not implement this endpoint")
            return 404, _error("Not Found", "404")
        return handler(op, request, full, repo, segments)

    def _op_repos_get(self, op, request, full, repo, segments):
        owner, name = full.split("/")
        body = self.api.example(op, 200)
        body.update(name=name, full_name=full, default_branch=repo["default_branch"],
                    html_url=f"https://github.com/{full}")
        body["owner"]["login"] = owner
        return 200, self._complete(op, 200, body)

    def _op_issues_get(self, op, request, full, repo, segments):
        issue = repo["issues"].get(int(segments[4]))
        if issue is None:
            return 404, _error("Not Found", "404")
        body = self.api.example(op, 200)
        body.update(number=int(segments[4]), title=issue["title"], body=issue["body"], state="open",
                    html_url=f"https://github.com/{full}/issues/{segments[4]}")
        if issue["pull_request"]:
            body["pull_request"] = {"url": f"https://api.github.com/repos/{full}/pulls/{segments[4]}"}
        else:
            body.pop("pull_request", None)
        return 200, self._complete(op, 200, body)

    def _op_pulls_list(self, op, request, full, repo, segments):
        state = request.query.get("state", ["open"])[0]
        head = request.query.get("head", [None])[0]
        found = [p for p in self.pulls if p.repo == full and (state == "all" or p.state == state)
                 and (head is None or f"{p.head_owner}:{p.head}" == head)]
        if self.list_lags > 0:
            self.list_lags -= 1
            found = []
        template = self.api.example(op, 200)[0]
        return 200, [self._complete(op, 200, [self._render(template, p)])[0] for p in found]

    def _op_pulls_create(self, op, request, full, repo, segments):
        body = request.body
        owner = full.split("/")[0]
        head_owner, _, head = body["head"].rpartition(":")
        head_owner = head_owner or owner
        missing = [f for f, ref in (("head", head), ("base", body["base"])) if not self._branch_exists(ref)]
        if missing:
            return 422, {"message": "Validation Failed", "documentation_url": DOCS + "/pulls/pulls#create-a-pull-request",
                         "status": "422", "errors": [{"resource": "PullRequest", "field": f, "code": "invalid"} for f in missing]}
        if any(p.repo == full and p.state == "open" and (p.head_owner, p.head) == (head_owner, head) for p in self.pulls):
            return 422, {"message": "Validation Failed", "documentation_url": DOCS + "/pulls/pulls#create-a-pull-request",
                         "status": "422", "errors": [{"resource": "PullRequest", "code": "custom",
                                                      "message": f"A pull request already exists for {head_owner}:{head}."}]}
        pull = Pull(len(self.pulls) + 1, full, body.get("title", ""), body.get("body", ""), head, head_owner,
                    body["base"], bool(body.get("draft", False)))
        self.pulls.append(pull)
        return 201, self._complete(op, 201, self._render(self.api.example(op, 201), pull))

    def _op_pulls_update(self, op, request, full, repo, segments):
        pull = next((p for p in self.pulls if p.repo == full and p.number == int(segments[4])), None)
        if pull is None:
            return 404, _error("Not Found", "404")
        for key in ("title", "body", "base", "state"):
            if key in (request.body or {}):
                setattr(pull, key, request.body[key])
        return 200, self._complete(op, 200, self._render(self.api.example(op, 200), pull))

    def _graphql(self, request: Request) -> tuple[int, dict[str, str], Any]:
        body = request.body if isinstance(request.body, dict) else {}
        query, variables = str(body.get("query", "")), body.get("variables") or {}
        mutation = next((m for m in ("convertPullRequestToDraft", "markPullRequestReadyForReview") if m in query), None)
        if mutation is None or set(body) - {"query", "variables", "operationName"}:
            self.violations.append(f"graphql: unexpected request {body!r}")
            return 200, {}, {"errors": [{"message": "Parse error"}]}
        pull = next((p for p in self.pulls if p.node_id == variables.get("id")), None)
        if pull is None:
            return 200, {}, {"data": {mutation: None}, "errors": [
                {"type": "NOT_FOUND", "path": [mutation], "message": f"Could not resolve to a node with the global id of '{variables.get('id')}'"}]}
        pull.draft = mutation == "convertPullRequestToDraft"
        return 200, {}, {"data": {mutation: {"pullRequest": {"isDraft": pull.draft}}}}

    # -- helpers --------------------------------------------------------------------------------
    def _render(self, template: dict[str, Any], pull: Pull) -> dict[str, Any]:
        body = json.loads(json.dumps(template))
        url = f"https://github.com/{pull.repo}/pull/{pull.number}"
        body.update(number=pull.number, id=1000 + pull.number, node_id=pull.node_id, html_url=url, title=pull.title,
                    body=pull.body, draft=pull.draft, state=pull.state,
                    url=f"https://api.github.com/repos/{pull.repo}/pulls/{pull.number}")
        body["head"].update(ref=pull.head, label=f"{pull.head_owner}:{pull.head}", sha=self._sha(pull.head))
        body["base"].update(ref=pull.base, label=f"{pull.repo.split('/')[0]}:{pull.base}")
        return body

    def _complete(self, op: Operation, status: int, body: Any) -> Any:
        schema = self.api.resolve(op.spec["responses"][str(status)])["content"]["application/json"]["schema"]
        return complete(self.api, body, schema)

    def _branch_exists(self, branch: str) -> bool:
        return self.bare_repo is None or bool(self._sha(branch))

    def _sha(self, branch: str) -> str:
        if self.bare_repo is None:
            return "0" * 40
        proc = subprocess.run(["git", "--git-dir", str(self.bare_repo), "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
                              capture_output=True, text=True)
        return proc.stdout.strip()

    def calls(self, operation: str) -> list[Request]:
        return [r for r in self.requests if r.operation == operation]


def _error(message: str, status: str | None = None) -> dict[str, Any]:
    body = {"message": message, "documentation_url": DOCS}
    if status:
        body["status"] = status
    return body


# -- pytest fixtures (import them into a test module to use them) ---------------------------------


@pytest.fixture(scope="session")
def github_api() -> OpenApi:
    """GitHub's REST API description from the @octokit/openapi npm package (installed on first use)."""
    from npm_fixtures import github_openapi_path

    return OpenApi(github_openapi_path())


@pytest.fixture
def fake_github(github_api):
    fake = FakeGitHub(github_api)
    fake.start()
    yield fake
    fake.stop()

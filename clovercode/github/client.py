"""A small GitHub REST client on urllib: JSON in and out, and errors a person can act on.

Every failure becomes a :class:`GitHubError` (a VcsError, exit code 7) whose message says what GitHub
answered: bad credentials, missing permissions, rate limits with their reset time, validation errors.
"""

from __future__ import annotations

import datetime as _dt
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from clovercode import __version__
from clovercode.ground.errors import UsageError, VcsError

API_VERSION = "2022-11-28"
TIMEOUT = 30.0


class GitHubError(VcsError):
    """A GitHub request failed; ``status`` is the HTTP status (0: no answer at all)."""

    def __init__(self, message: str, *, status: int = 0, hint: str | None = None,
                 errors: list[dict[str, Any]] | None = None):
        super().__init__(message, hint=hint)
        self.status = status
        self.errors = errors or []


@dataclass
class Response:
    status: int
    data: Any
    headers: Mapping[str, str] = field(default_factory=dict)
    what: str = ""  # "METHOD URL", for messages

    def object(self) -> dict[str, Any]:
        """The answer as a JSON object ({} for an empty answer); a GitHubError for anything else."""
        return self._expect(dict, "an object")

    def objects(self) -> list[dict[str, Any]]:
        """The answer as a JSON list of objects ([] for an empty answer)."""
        items = self._expect(list, "a list")
        if not all(isinstance(item, dict) for item in items):
            raise self._unexpected("a list of objects")
        return items

    def _expect(self, kind: type, shown: str) -> Any:
        data = kind() if self.data is None else self.data
        if not isinstance(data, kind):
            raise self._unexpected(shown)
        return data

    def _unexpected(self, shown: str) -> "GitHubError":
        return GitHubError(f"{self.what}: GitHub's answer is not {shown} (is github.api_url a GitHub API?)",
                           status=self.status)


Opener = Callable[[urllib.request.Request, float], Any]


def _default_opener(request: urllib.request.Request, timeout: float) -> Any:
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - the URL is the configured API


class GitHubClient:
    def __init__(self, api_url: str, token: str | None, *, timeout: float = TIMEOUT, opener: Opener = _default_opener):
        parts = urllib.parse.urlsplit(api_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(f"github.api_url: expected an http(s) URL, got {api_url!r}",
                             hint="GitHub: https://api.github.com; GitHub Enterprise: https://HOST/api/v3.")
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.opener = opener

    def request(self, method: str, path: str, *, body: Any = None, query: Mapping[str, Any] | None = None,
                url: str | None = None) -> Response:
        """``method path`` relative to the API base (or a full ``url``); returns the decoded JSON."""
        target = url or self.api_url + path
        if query:
            target += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(target, data=data, method=method, headers=self._headers(data is not None))
        what = f"{method} {target}"
        try:
            with self.opener(request, self.timeout) as answer:
                raw = answer.read()
                return Response(answer.status, _decode(raw, what), dict(answer.headers.items()), what)
        except urllib.error.HTTPError as exc:
            raw = exc.read() if exc.fp is not None else b""
            raise http_error(what, exc.code, _decode_error(raw), exc.headers or {}, self.token is not None) from None
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise GitHubError(f"cannot reach the GitHub API at {self.api_url}: {reason}",
                              hint="Check the network and the github.api_url setting "
                                   "(GitHub Enterprise: https://HOST/api/v3).") from None

    def _headers(self, has_body: bool) -> dict[str, str]:
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION,
                   "User-Agent": f"clovercode/{__version__}"}
        if has_body:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


def _decode(raw: bytes, what: str) -> Any:
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise GitHubError(f"{what}: the answer is not JSON (is github.api_url a GitHub API?)") from None


def _decode_error(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw) if raw.strip() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = {"message": raw[:200].decode("utf-8", "replace")}
    return data if isinstance(data, dict) else {"message": str(data)}


def http_error(what: str, status: int, data: Mapping[str, Any], headers: Mapping[str, str], had_token: bool) -> GitHubError:
    """GitHub's error answer as a message for a person (pure; tested with GitHub's documented answers)."""
    message = str(data.get("message") or f"HTTP {status}")
    errors = [e for e in data.get("errors") or [] if isinstance(e, dict)]
    lower = {k.lower(): v for k, v in headers.items()}
    if status in (403, 429) and (lower.get("x-ratelimit-remaining") == "0" or "retry-after" in lower):
        return GitHubError(f"{what}: GitHub rate limit: {message}", status=status, hint=_rate_hint(lower))
    if status == 401:
        hint = ("The token in GITHUB_TOKEN / GH_TOKEN was rejected (expired or revoked?): create a new one."
                if had_token else "Set GITHUB_TOKEN (or GH_TOKEN) to a token with access to the repository.")
        return GitHubError(f"{what}: GitHub answered 401 {message}", status=status, hint=hint)
    if status in (403, 404):
        hint = ("The token lacks a permission, or cannot see the repository: it needs contents: write, "
                "pull-requests: write and issues: read (see docs/ci.md).")
        return GitHubError(f"{what}: GitHub answered {status} {message}", status=status, hint=hint)
    details = "; ".join(str(e.get("message") or f"{e.get('resource', '')}.{e.get('field', '')} {e.get('code', '')}".strip())
                        for e in errors)
    return GitHubError(f"{what}: GitHub answered {status} {message}" + (f" ({details})" if details else ""),
                       status=status, errors=errors)


def _rate_hint(headers: Mapping[str, str]) -> str:
    if "retry-after" in headers:
        return f"Secondary rate limit: GitHub asks to wait {headers['retry-after']} s before trying again."
    reset = headers.get("x-ratelimit-reset")
    try:
        at = _dt.datetime.fromtimestamp(int(reset or ""), _dt.timezone.utc)
    except ValueError:
        return "Wait for the rate limit to reset, then run again."
    minutes = max(0, round((at - _dt.datetime.now(_dt.timezone.utc)).total_seconds() / 60))
    used = f" ({headers.get('x-ratelimit-used')} of {headers.get('x-ratelimit-limit')} used)" if headers.get("x-ratelimit-limit") else ""
    return f"The limit{used} resets at {at:%H:%M} UTC, in about {minutes} min; run again then."

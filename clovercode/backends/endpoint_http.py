"""HTTP for the endpoint backend: one request with timeouts, retries with backoff, and errors that
say what went wrong (server down, wrong key, wrong model, context too long) instead of a status code.

Standard library only (``http.client``): the endpoint backend must not need the ``openai`` package.
"""

from __future__ import annotations

import http.client
import json
import random
import re
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar
from urllib.parse import urlsplit

from clovercode.backends.abortable import current as current_call
from clovercode.backends.base import ContextTooLong, ModelError
from clovercode.ground.errors import CloverError, ConfigError

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
ERROR_BODY_LIMIT = 65536
_CONTEXT_RE = re.compile(
    r"context[ _-]?(length|window)|maximum context|max_model_len|prompt is too long|too many (input )?tokens"
    r"|exceeds? the (model'?s? )?(max|maximum|context)|input (is )?too long", re.I)
_MODEL_RE = re.compile(r"model", re.I)

T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    """Where the server is: ``base_path`` is the API root, e.g. ``/v1``."""

    scheme: str
    host: str
    port: int
    base_path: str

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{self.base_path}"


def parse_base_url(url: str) -> Target:
    """Accept ``http://host:port/v1`` and the usual variants (no ``/v1``, a pasted
    ``.../chat/completions``); raise ConfigError for anything that is not an http(s) URL."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"endpoint '{url}' is not an http(s) URL",
                          hint="Give the server's API root, e.g. --endpoint http://127.0.0.1:30000/v1")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"endpoint '{url}' has an invalid port") from None
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/models"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    return Target(parts.scheme, parts.hostname, port, path or "/v1")


class HttpFailure(Exception):
    """A request that did not produce a usable response; ``retryable`` says whether to try again."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False,
                 retry_after: float | None = None, code: str | None = None):
        super().__init__(message)
        self.message, self.status, self.retryable = message, status, retryable
        self.retry_after, self.code = retry_after, code


@dataclass
class Transport:
    target: Target
    api_key: str = ""
    connect_timeout: float = 10.0
    read_timeout: float = 600.0

    def open(self, method: str, path: str, body: dict[str, Any] | None = None) -> http.client.HTTPResponse:
        """Send one request; return the response (status < 400) with its body unread. The caller
        closes it. Raises HttpFailure for connection problems and error statuses."""
        conn = self._connection()
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8") if body is not None else None
        headers = {"Accept": "application/json, text/event-stream", "User-Agent": "clovercode"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            conn.request(method, self.target.base_path + path, body=payload, headers=headers)
            response = conn.getresponse()
        except socket.timeout:
            conn.close()
            raise HttpFailure(f"no response within {self.read_timeout:g} s", retryable=True) from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            _raise_if_stopped()
            raise HttpFailure(f"the connection failed: {_reason(exc)}", retryable=True) from None
        if response.status >= 400:
            raise _status_failure(response)
        return response

    def _connection(self) -> http.client.HTTPConnection:
        _raise_if_stopped()
        cls = http.client.HTTPSConnection if self.target.scheme == "https" else http.client.HTTPConnection
        kwargs: dict[str, Any] = {"context": ssl.create_default_context()} if self.target.scheme == "https" else {}
        conn = cls(self.target.host, self.target.port, timeout=self.connect_timeout, **kwargs)
        try:
            conn.connect()
        except socket.timeout:
            conn.close()
            raise HttpFailure(f"timed out connecting after {self.connect_timeout:g} s", retryable=True) from None
        except OSError as exc:
            conn.close()
            raise HttpFailure(f"cannot connect: {_reason(exc)}", retryable=True) from None
        assert conn.sock is not None
        conn.sock.settimeout(self.read_timeout)  # from now on: the longest wait for the next bytes
        call = current_call()
        if call is not None:  # a caller may stop this call from another thread (backends/abortable.py)
            call.track(conn.sock)
        return conn


def _raise_if_stopped() -> None:
    """A call its caller aborted neither retries nor opens another connection."""
    call = current_call()
    if call is not None and call.aborted:
        raise HttpFailure("the model call was stopped by its caller", retryable=False)


def with_retries(attempt: Callable[[], T], retries: int, *, backoff: float = 0.5, max_backoff: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """``attempt()``, tried again on retryable failures: exponential backoff with jitter (so a fleet
    of clients does not retry in lockstep), or the server's Retry-After when it gives one."""
    for number in range(retries + 1):
        try:
            return attempt()
        except HttpFailure as exc:
            if not exc.retryable or number == retries:
                if exc.retryable and retries:
                    exc.message += f" (gave up after {retries} retr{'y' if retries == 1 else 'ies'})"
                raise
            delay = exc.retry_after if exc.retry_after is not None else backoff * 2 ** number * random.uniform(1.0, 1.25)
            sleep(min(delay, max_backoff))
    raise AssertionError("unreachable")


def _status_failure(response: http.client.HTTPResponse) -> HttpFailure:
    try:
        raw = response.read(ERROR_BODY_LIMIT)
    except (OSError, http.client.HTTPException):
        raw = b""
    finally:
        response.close()
    message, code = error_message(raw)
    retry_after = None
    header = response.getheader("Retry-After")
    if header:
        try:
            retry_after = max(0.0, float(header))
        except ValueError:
            retry_after = None
    return HttpFailure(message or http.client.responses.get(response.status, "error"), status=response.status,
                       retryable=response.status in RETRY_STATUSES, retry_after=retry_after, code=code)


def error_message(raw: bytes | str) -> tuple[str, str | None]:
    """The human message and error code out of the error bodies servers send: OpenAI's
    ``{"error": {...}}``, vLLM's ``{"object": "error", "message": ...}``, FastAPI's ``{"detail": ...}``."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return " ".join(text.split())[:300], None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    if isinstance(body, dict):
        message = body.get("message") or body.get("detail") or body.get("error") or ""
        code = body.get("code")
        return (message if isinstance(message, str) else json.dumps(message))[:1000], str(code) if code else None
    return str(body)[:300], None


def is_context_error(failure: HttpFailure) -> bool:
    return failure.code == "context_length_exceeded" or (
        failure.status in (400, 413, 422, None) and bool(_CONTEXT_RE.search(failure.message)))


def domain_error(failure: HttpFailure, target: Target, model: str, cls: type[CloverError] = ModelError) -> CloverError:
    """The CloverError a person should see for ``failure`` (``cls``: ModelUnavailable before a run,
    ModelError during one; a context overflow is always ContextTooLong)."""
    where = target.url
    if is_context_error(failure):
        return ContextTooLong(f"the conversation no longer fits the model's context window: {failure.message}",
                              hint="Shorten the task or start a new session; the server sets its context length "
                              "(SGLang --context-length, vLLM --max-model-len, llama.cpp --ctx-size).")
    if failure.status in (401, 403):
        return cls(f"the endpoint {where} rejected the API key (HTTP {failure.status}): {failure.message}",
                   hint="Set CLOVERCODE_API_KEY (or --api-key) to the key the server was started with.")
    if failure.status == 404 and _MODEL_RE.search(failure.message):
        return cls(f"the endpoint {where} has no model '{model}': {failure.message}",
                   hint="Set endpoint_model (CLOVERCODE_ENDPOINT_MODEL) to a name from GET /v1/models.")
    if failure.status is None:
        return cls(f"cannot reach the endpoint {where}: {failure.message}",
                   hint="Is the server running and the URL right (including the /v1 root)? See docs/endpoint.md.")
    if failure.status == 429:
        return cls(f"the endpoint {where} is overloaded (HTTP 429): {failure.message}",
                   hint="Raise endpoint_retries, or give the server more capacity (serve.max_queue).")
    return cls(f"the endpoint {where} failed (HTTP {failure.status}): {failure.message}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (nothing is listening there)"
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror or exc})"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection without answering"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__

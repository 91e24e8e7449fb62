"""The HTTP side of ``clovercode serve``: routes, auth, request bodies, disconnect detection.

Standard library only (``http.server`` with a thread per connection, serve/connections.py): handler
threads parse and answer; the one model is driven by the scheduler's worker. A handler that notices
its client has gone (a failed write, or the socket closing while it waits) cancels the job, which
frees the model at the next step. Every answer either follows a body read whole or closes the
connection: an unread body would be taken for the next request on a kept-alive connection.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

from clovercode.serve.chat import answer_stream, answer_whole, stream_error_event
from clovercode.serve.connections import ConnectionCaps, ServeHTTPServer
from clovercode.serve.errors import api_error, refuse_overlong
from clovercode.serve.waiting import LOOK, ClientGone, EventWait
from clovercode.serve.protocol import ApiError, Limits, model_list, new_completion_id, parse_chat_request
from clovercode.serve.responses import RESPONSES_PATH, ResponseStore, parse_responses_request
from clovercode.serve.responses_answer import answer_responses
from clovercode.backends.scheduler import Job, QueueFull, Scheduler, ServerStopping
from clovercode.trust.serve import cache_scope, tenant_scope_prefix, tenant_of

HEALTH_PATHS = ("/health", "/healthz", "/v1/health")
RESET_PATHS = ("/reset_prefix_cache", "/v1/reset_prefix_cache")  # POST: drop the prompts kept for reuse
CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
KEEPALIVE_S = 10.0  # the default of ServeApp.keepalive_s
WRITE_TIMEOUT_S = 120.0  # a stalled reply write
DRAIN_LIMIT = 64 * 1024  # an unused body up to this size is read and dropped (keep-alive); larger: close
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # \ud800-\udfff: maybe a lone surrogate


class BodyTimeout(Exception):
    pass


@dataclass
class ServeApp:
    """What every request handler shares."""

    scheduler: Scheduler
    model_name: str
    limits: Limits
    api_key: str = ""  # one key (tenant "default"); api_keys: several, key → tenant
    max_request_bytes: int = 4 * 1024 * 1024
    context_window: int | None = None
    log: Callable[[str], None] = lambda line: None
    created: int = field(default_factory=lambda: int(time.time()))
    api_keys: dict[str, str] = field(default_factory=dict)
    responses: ResponseStore = field(default_factory=ResponseStore)
    # A stream that has nothing to send gets an SSE comment this often (a prefill can take minutes on
    # a CPU host; Codex gives up after 300 s of silence, proxies sooner).
    keepalive_s: float = KEEPALIVE_S

    def __post_init__(self) -> None:
        if self.api_key and self.api_key not in self.api_keys:
            self.api_keys = {**self.api_keys, self.api_key: "default"}


def make_server(app: ServeApp | None, host: str, port: int, caps: ConnectionCaps | None = None) -> ServeHTTPServer:
    """Bind now (a busy port fails here); ``app`` may be attached later, before serving."""
    return ServeHTTPServer((host, port), app, Handler, caps or ConnectionCaps())


class Handler(EventWait, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections; streams use chunked encoding
    server_version = "clovercode-serve"
    timeout = WRITE_TIMEOUT_S  # per read or write once the headers are in (the server's header_timeout before)
    server: ServeHTTPServer
    _continue = False  # the client sent "Expect: 100-continue" and waits for the 100 before its body
    _body_done = False  # this request's body has been read (or needs no reading)
    tenant = ""  # whose API key the request carries ("" without keys)

    @property
    def app(self) -> ServeApp:
        return self.server.app

    def log_message(self, format: str, *args: Any) -> None:  # http.server's per-request noise: off
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, TimeoutError):
            pass  # a keep-alive client that went away between requests: nothing to answer

    def handle_one_request(self) -> None:
        self._streaming, self._body_done, self.tenant, self._continue, self._probed = False, False, "", False, False
        self.server.expect_headers(self.connection)
        try:
            self.connection.settimeout(self.server.header_timeout)
        except OSError:
            self.close_connection = True
            return
        super().handle_one_request()

    def parse_request(self) -> bool:
        ok = super().parse_request()  # reads the headers
        self.server.headers_done(self.connection)
        try:
            self.connection.settimeout(self.timeout)
        except OSError:
            return False
        return ok

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, a header too long, an unknown
        method, HTTP/2) as the JSON errors OpenAI clients read, with a 4xx status."""
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.1"  # never answer without a status line
        self.close_connection = True
        reason = message or self.responses.get(code, ("bad request",))[0]
        headers = {}
        if code == 501:  # an unknown method
            code, reason = 405, f"method not allowed: {reason}"
            allowed = self._allowed(self._path()) if getattr(self, "path", None) else ()
            if allowed:
                headers["Allow"] = ", ".join(allowed)
        elif code >= 500:
            code = 400
        self._send_error(ApiError(code, f"{reason}; this server speaks HTTP/1.1 with JSON bodies",
                                  code="bad_request", headers=headers))

    # ---- routes -----------------------------------------------------------------------------

    def handle_expect_100(self) -> bool:
        """Not yet: the 100 goes out only once the key and the declared size have passed
        (``_read_json``); a request refused before that gets its error and the connection closes."""
        self._continue = True
        return True

    def do_GET(self) -> None:
        self._route("GET")

    def do_HEAD(self) -> None:
        """A GET route's status and headers, no body (RFC 9110); any other route's error, no body."""
        self._route("HEAD")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def _allowed(self, path: str) -> tuple[str, ...]:
        """The methods ``path`` answers ((): no such route)."""
        if path in HEALTH_PATHS or path in (MODELS_PATH, f"{MODELS_PATH}/{self.app.model_name}"):
            return ("GET", "HEAD")
        if path in (CHAT_PATH, RESPONSES_PATH, *RESET_PATHS):
            return ("POST",)
        if path.startswith(RESPONSES_PATH + "/"):
            return ("GET", "HEAD")
        return ()

    def _route(self, method: str) -> None:
        path = self._path()
        try:
            allowed = self._allowed(path)
            if not allowed:
                raise ApiError(404, f"no {method} route {path}; this server offers POST {CHAT_PATH}, POST "
                               f"{RESPONSES_PATH}, GET {MODELS_PATH} and GET /health", code="not_found")
            if method == "HEAD" and "GET" in allowed:
                method = "GET"
            if method not in allowed:
                raise ApiError(405, f"use {' or '.join(allowed)} for {path}", code="method_not_allowed",
                               headers={"Allow": ", ".join(allowed)})
            if path in HEALTH_PATHS:
                self._health()
                return
            self._authorize()
            if path in RESET_PATHS:
                self._reset_prefix_cache()
            elif path == CHAT_PATH:
                self._generate(parse_chat_request, answer_stream, answer_whole)
            elif path == RESPONSES_PATH:
                self._generate(self._parse_responses, *answer_responses(self.app.responses, self.tenant))
            elif path.startswith(RESPONSES_PATH + "/"):
                self.send_json(200, self.app.responses.get(self.tenant, path[len(RESPONSES_PATH) + 1:]))
            elif path == MODELS_PATH:
                self.send_json(200, model_list(self.app.model_name, self.app.created, self.app.context_window))
            else:
                self.send_json(200, model_list(self.app.model_name, self.app.created, self.app.context_window)["data"][0])
        except ApiError as exc:
            self._send_error(exc)
        except ClientGone:
            self.close_connection = True

    def _health(self) -> None:
        """Status only, unless the caller holds a key (or the server has none): the counters say how
        busy the others are."""
        body: dict[str, Any] = {"status": "ok"}
        if not self.app.api_keys or self._token_tenant() is not None:
            body.update(model=self.app.model_name, **self.app.scheduler.snapshot())
        self.send_json(200, body)

    def _parse_responses(self, body: Any, limits: Limits) -> Any:
        return parse_responses_request(body, limits, self.app.responses, self.tenant)

    def _generate(self, parse: Callable[[Any, Limits], Any], stream: Callable[..., str], whole: Callable[..., str]) -> None:
        started = time.monotonic()
        job: Job | None = None
        try:
            request = self._parse(parse, self._read_json())
            if request.model and request.model != self.app.model_name:
                raise ApiError(404, f"The model '{request.model}' does not exist; this server serves "
                               f"'{self.app.model_name}'.", code="model_not_found", param="model")
            # With keys each key is a tenant: its own lane in the queue, its own prompt cache.
            params = replace(request.params, cache_scope=cache_scope(self.tenant, request.cache_key))
            refuse_overlong(self.app.scheduler.backend, request.messages, params.max_new_tokens)
            job = Job(new_completion_id(), request.messages, request.tools, params,
                      self.tenant or request.user or self.client_address[0])
            try:
                self.app.scheduler.submit(job)
            except QueueFull as exc:
                raise ApiError(429, f"the server is busy: {exc}; retry shortly", type="rate_limit_error",
                               code="queue_full", headers={"Retry-After": "1"}) from None
            except ServerStopping as exc:
                raise ApiError(503, str(exc), type="server_error") from None
            # a hang-up while the model is silent is seen at once (serve/hangups.py), not at the next look
            self._on_hangup = lambda: job.events.put(LOOK)  # type: ignore[union-attr]
            self.server.hangups.watch(self.connection, self._on_hangup)
            outcome = (stream if request.stream else whole)(self, job, request)
        except ApiError as exc:
            self._send_error(exc)
            outcome = f"error {exc.status}"
        except ClientGone:
            self.close_connection = True
            outcome = "client gone"
        except Exception as exc:  # a bug: the client still gets an answer, the log gets the traceback
            error = api_error(exc, self.app.log)
            if self._streaming:  # the status line is gone: an error event is all that can be said
                self._end_stream_quietly(error)
            else:
                self._send_error(error)
            outcome = "internal error"
        finally:
            if job is not None:
                self.server.hangups.unwatch(self.connection)
                self.app.scheduler.cancel(job)  # no-op when it finished; stops it when this handler gave up
        if job is not None:
            waited = (job.started or time.monotonic()) - job.enqueued
            self.app.log(f"{job.id} client={job.client} {outcome} waited={waited:.3f}s total={time.monotonic() - started:.3f}s")

    def _reset_prefix_cache(self) -> None:
        """Drop the prompts kept for reuse (vLLM's route name; benchmarks call it between runs): with
        keys, only the caller's tenant's."""
        scope = tenant_scope_prefix(self.tenant) if self.app.api_keys else None
        if not self.app.scheduler.forget_prompts(scope=scope):
            raise ApiError(503, "the model did not get to the reset within 30 s; retry when it is idle", type="server_error")
        self.send_json(200, {"status": "ok"})

    # ---- answering (serve/chat.py, serve/responses.py) --------------------------------------

    def begin_events(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._streaming = True

    def _end_stream_quietly(self, error: ApiError) -> None:
        self.close_connection = True
        try:
            self.write_chunk(stream_error_event(error))
            self.write_chunk(b"")
        except ClientGone:
            pass

    # ---- plumbing ----------------------------------------------------------------------------

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def _token_tenant(self) -> str | None:
        given = self.headers.get("Authorization", "")
        token = given[7:].strip() if given.lower().startswith("bearer ") else ""
        return tenant_of(token, self.app.api_keys) if token else None

    def _authorize(self) -> None:
        """Without keys every client is the one tenant ""; with keys the token names the tenant, and
        a tenant holds at most its share of the connections."""
        self.tenant = ""
        if not self.app.api_keys:
            return
        tenant = self._token_tenant()
        if tenant is None:
            self.close_connection = True  # the body is not read
            raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                           type="authentication_error", code="invalid_api_key")
        if not self.server.enter_tenant(self.connection, tenant):
            self.close_connection = True
            raise ApiError(429, f"too many open connections for your API key (serve.max_connections_per_key = "
                           f"{self.server.caps.per_tenant}); reuse or close some", type="rate_limit_error",
                           code="too_many_connections", headers={"Retry-After": "1"})
        self.tenant = tenant

    def _parse(self, parse: Callable[[Any, Limits], Any], body: Any) -> Any:
        """The body as a request; any failure is the body's (a 400), not the server's."""
        try:
            return parse(body, self.app.limits)
        except ApiError:
            raise
        except Exception as exc:  # a shape the parser did not foresee: still the client's error
            self.app.log(f"request refused by the parser: {type(exc).__name__}: {exc}")
            raise ApiError(400, f"the request body could not be read ({type(exc).__name__})") from None

    def _body_length(self) -> int | None:
        """The declared body length; None when it cannot be trusted (chunked, several, not a number)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return None
        lengths = {value.strip() for value in self.headers.get_all("Content-Length") or ()}
        if not lengths:
            return 0
        if len(lengths) != 1 or not next(iter(lengths)).isdigit():  # also: two different lengths (smuggling)
            return None
        return int(next(iter(lengths)))

    def _read_body(self, length: int) -> bytes:
        """``length`` bytes of body, all within serve.body_timeout however slowly they come."""
        self._body_done = True
        deadline = time.monotonic() + self.server.caps.body_timeout
        parts, got = [], 0
        try:
            while got < length:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BodyTimeout()
                self.connection.settimeout(left)
                data = self.rfile.read1(min(length - got, 1 << 16))
                if not data:
                    raise ClientGone()
                parts.append(data)
                got += len(data)
        except TimeoutError:
            raise BodyTimeout() from None
        except OSError:
            raise ClientGone() from None
        finally:
            try:
                self.connection.settimeout(self.timeout)
            except OSError:
                pass
        return b"".join(parts)

    def _settle_body(self) -> None:
        """Before any answer: the body is read (a small one is dropped) or the connection will close."""
        if self._body_done or self.close_connection:
            return
        self._body_done = True
        if self._continue:  # no 100 went out: the body may never come, so it is not waited for
            self.close_connection = True
            return
        length = self._body_length() if getattr(self, "headers", None) is not None else None
        if length == 0:
            return
        if length is None or length > DRAIN_LIMIT:
            self.close_connection = True
            return
        try:
            self._read_body(length)
        except (ClientGone, BodyTimeout):
            self.close_connection = True

    def _read_json(self) -> Any:
        if self.headers.get("Content-Length") is None or "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise ApiError(411, "send the request body with a Content-Length header")
        length = self._body_length()
        if length is None:
            self.close_connection = True
            raise ApiError(400, "Content-Length must be one whole number of bytes")
        if length > self.app.max_request_bytes:
            self.close_connection = True
            raise ApiError(413, f"the request body is {length} bytes; this server accepts at most "
                           f"{self.app.max_request_bytes} (serve.max_request_bytes)", code="request_too_large")
        if self._continue:  # the key and the size passed: now the client may send the body
            self._continue = False
            try:
                self.send_response_only(100)
                self.end_headers()
            except OSError:
                raise ClientGone() from None
        try:
            raw = self._read_body(length)
        except BodyTimeout:
            self.close_connection = True
            raise ApiError(408, f"the request body did not arrive within {self.server.caps.body_timeout:g} s "
                           "(serve.body_timeout)", code="request_timeout") from None
        kind = self.headers.get_content_type()  # lenient: curl -d sends form-urlencoded JSON
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, nesting
            detail = str(exc) if not isinstance(exc, RecursionError) else "nested too deeply"
            sent = f" (sent as {kind})" if self.headers.get("Content-Type") and kind != "application/json" else ""
            raise ApiError(400, f"the request body is not valid JSON{sent}: {detail}") from None
        if _SURROGATE_ESCAPE.search(raw):
            try:
                json.dumps(body, ensure_ascii=False).encode("utf-8")
            except (UnicodeEncodeError, RecursionError):
                raise ApiError(400, "the request body holds a lone UTF-16 surrogate (\\ud800-\\udfff), "
                               "which is no character") from None
        return body

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._settle_body()
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            raise ClientGone() from None

    def _send_error(self, exc: ApiError) -> None:
        try:
            self.send_json(exc.status, exc.body(), exc.headers)
        except ClientGone:
            pass

    def write_chunk(self, data: bytes) -> None:
        self._last_write = time.monotonic()
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n")
            self.wfile.flush()
        except OSError:
            raise ClientGone() from None

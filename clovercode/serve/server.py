"""The HTTP side of ``clovercode serve``: routes, auth, limits, SSE, disconnect detection.

Standard library only (``http.server`` with a thread per connection): handler threads parse and
answer; the one model is driven by the scheduler's worker. A handler that notices its client has
gone (a failed write, or the socket closing while it waits) cancels the job, which frees the
model at the next step.
"""

from __future__ import annotations

import json
import queue
import re
import select
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from clovercode.backends.base import ContextTooLong
from clovercode.backends.sse import sse_event
from clovercode.errors import CloverError, UsageError
from clovercode.serve.protocol import (ApiError, ChatRequest, Limits, chunk_object, completion_object, error_body,
                                       finish_reason, model_list, new_completion_id, parse_chat_request,
                                       tool_call_objects, usage_chunk_object)
from clovercode.serve.reply import Reply, ReplyEvents, collect
from clovercode.serve.scheduler import DONE, Failed, Job, QueueFull, Scheduler, ServerStopping
from clovercode.trust.serve import cache_scope, tenant_of

HEALTH_PATHS = ("/health", "/healthz", "/v1/health")
RESET_PATHS = ("/reset_prefix_cache", "/v1/reset_prefix_cache")  # POST: drop the prompts kept for reuse
_BUSY_BODY = json.dumps(error_body("too many open connections; retry shortly", "server_error", "too_many_connections")).encode()
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
         b"Connection: close\r\nContent-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY)
CHAT_PATH = "/v1/chat/completions"
DISCONNECT_CHECK_S = 0.25
HEADER_TIMEOUT_S = 5.0  # default: request line and headers, or a keep-alive connection's idle wait
BODY_TIMEOUT_S = 120.0  # a stalled body read or reply write
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # \ud800-\udfff: maybe a lone surrogate


class ClientGone(Exception):
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

    def __post_init__(self) -> None:
        if self.api_key and self.api_key not in self.api_keys:
            self.api_keys = {**self.api_keys, self.api_key: "default"}


class ServeHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most ``max_connections`` of them: beyond that a connection gets
    an immediate 503, so idle or stalled clients cannot exhaust the process."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # a fleet of bots connecting at once must not be refused by the backlog

    def __init__(self, address: tuple[str, int], app: ServeApp | None, max_connections: int = 256,
                 header_timeout: float = HEADER_TIMEOUT_S):
        self.app = app  # type: ignore[assignment]  # may be set after binding, before serve_forever
        self.header_timeout = header_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        # Each open connection and its handler thread (None until the thread runs), for server_close.
        self._open: dict[socket.socket, threading.Thread | None] = {}
        # Connections waiting for a request line and headers, and when they must have sent them.
        self._deadlines: dict[socket.socket, float] = {}
        self._open_lock = threading.Lock()
        super().__init__(address, Handler)

    def expect_headers(self, sock: socket.socket) -> None:
        """``sock`` waits for a request (its first, or the next on a kept-alive connection): the line
        and its headers must be in within ``header_timeout`` seconds, however slowly they trickle."""
        with self._open_lock:
            self._deadlines[sock] = time.monotonic() + self.header_timeout

    def headers_done(self, sock: socket.socket) -> None:
        with self._open_lock:
            self._deadlines.pop(sock, None)

    def service_actions(self) -> None:
        """Run by serve_forever between polls: hang up on connections past their header deadline (a
        slow-loris client dribbling a header line now and then; an idle keep-alive connection), so
        they give their connection slot back. A socket timeout alone is per read, which a byte a
        second defeats."""
        now = time.monotonic()
        with self._open_lock:
            late = [sock for sock, deadline in self._deadlines.items() if deadline <= now]
            for sock in late:
                del self._deadlines[sock]
        for sock in late:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        with self._open_lock:
            self._open = {s: t for s, t in self._open.items() if t is None or t.is_alive()}
            self._open[request] = None
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: nothing will release the slot or the entry
            with self._open_lock:
                self._open.pop(request, None)
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open[request] = threading.current_thread()
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.headers_done(request)
            self._slots.release()

    def server_close(self, timeout: float = 5.0) -> None:
        """Stop listening, then end the connections still open and wait (at most ``timeout`` s) for
        their handler threads. A keep-alive client may keep a handler thread waiting for its next
        request long after serving stopped, and that thread holds the app: scheduler, backend, model.
        Left running, it can drop the last reference to the model while the interpreter finalizes;
        torch frees a tensor with the GIL released, the thread is refused the GIL back and ended by
        pthread_exit inside a noexcept C++ frame, and std::terminate aborts the process (exit status
        134; pytorch/pytorch#38228)."""
        super().server_close()
        deadline = time.monotonic() + timeout
        # First only the read side: a reply being written still goes out, an idle wait ends at once.
        for how in (socket.SHUT_RD, socket.SHUT_RDWR):
            if not self._wait_for_handlers(how, deadline if how == socket.SHUT_RDWR else
                                           min(deadline, time.monotonic() + timeout / 2)):
                return

    def _wait_for_handlers(self, how: int, deadline: float) -> bool:
        """Shut ``how`` on every open connection and join their threads until ``deadline``; whether
        any is still open."""
        while True:
            with self._open_lock:
                still = [(s, t) for s, t in self._open.items() if t is None or t.is_alive()]
            if not still or time.monotonic() >= deadline:
                return bool(still)
            for sock, _ in still:
                try:
                    sock.shutdown(how)
                except OSError:
                    pass  # already closed by its handler
            for _, thread in still:
                if thread is None:
                    time.sleep(0.01)  # started, not yet running: look again
                else:
                    thread.join(max(0.0, deadline - time.monotonic()))


def make_server(app: ServeApp | None, host: str, port: int, max_connections: int = 256,
                header_timeout: float = HEADER_TIMEOUT_S) -> ServeHTTPServer:
    """Bind now (a busy port fails here); ``app`` may be attached later, before serving."""
    return ServeHTTPServer((host, port), app, max_connections, header_timeout)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections; streams use chunked encoding
    server_version = "clovercode-serve"
    timeout = BODY_TIMEOUT_S  # per read or write once the headers are in (the server's header_timeout before)
    server: ServeHTTPServer
    _last_check = 0.0  # when _client_gone last looked (per handler instance once set)
    _streaming = False  # a 200 event stream has begun on this request
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
        if code == 501:  # an unknown method
            code, reason = 405, f"method not allowed: {reason}"
        elif code >= 500:
            code = 400
        self._send_error(ApiError(code, f"{reason}; this server speaks HTTP/1.1 with JSON bodies",
                                  code="bad_request"))

    # ---- routes -----------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self._path()
        try:
            if path in HEALTH_PATHS:
                self._send_json(200, {"status": "ok", "model": self.app.model_name, **self.app.scheduler.snapshot()})
                return
            self._authorize()
            if path == "/v1/models":
                self._send_json(200, model_list(self.app.model_name, self.app.created, self.app.context_window))
            elif path == f"/v1/models/{self.app.model_name}":
                self._send_json(200, model_list(self.app.model_name, self.app.created, self.app.context_window)["data"][0])
            elif path == CHAT_PATH:
                raise ApiError(405, f"use POST for {CHAT_PATH}", headers={"Allow": "POST"})
            else:
                raise ApiError(404, f"no route {path}; this server offers {CHAT_PATH}, /v1/models and /health",
                               code="not_found")
        except ApiError as exc:
            self._send_error(exc)
        except ClientGone:
            self.close_connection = True

    def do_POST(self) -> None:
        self._streaming = False
        path = self._path()
        started = time.monotonic()
        job: Job | None = None
        try:
            if path in RESET_PATHS:
                self._authorize()
                self._reset_prefix_cache()
                return
            if path != CHAT_PATH:
                raise ApiError(404 if path not in ("/v1/models", *HEALTH_PATHS) else 405,
                               f"no POST route {path}; post chat completions to {CHAT_PATH}", code="not_found")
            self._authorize()
            request = self._parse(self._read_json())
            if request.model and request.model != self.app.model_name:
                raise ApiError(404, f"The model '{request.model}' does not exist; this server serves "
                               f"'{self.app.model_name}'.", code="model_not_found", param="model")
            # With keys each key is a tenant: its own lane in the queue, its own prompt cache.
            params = replace(request.params, cache_scope=cache_scope(self.tenant, request.cache_key))
            job = Job(new_completion_id(), request.messages, request.tools, params,
                      self.tenant or request.user or self.client_address[0])
            try:
                self.app.scheduler.submit(job)
            except QueueFull as exc:
                raise ApiError(429, f"the server is busy: {exc}; retry shortly", type="rate_limit_error",
                               code="queue_full", headers={"Retry-After": "1"}) from None
            except ServerStopping as exc:
                raise ApiError(503, str(exc), type="server_error") from None
            if request.stream:
                outcome = self._stream(job, request)
            else:
                outcome = self._whole(job, request)
        except ApiError as exc:
            self._send_error(exc)
            outcome = f"error {exc.status}"
        except ClientGone:
            self.close_connection = True
            outcome = "client gone"
        except Exception as exc:  # a bug: the client still gets an answer, the log gets the traceback
            error = _api_error(exc, self.app.log)
            if self._streaming:  # the status line is gone: an error event is all that can be said
                self._end_stream_quietly(error)
            else:
                self._send_error(error)
            outcome = "internal error"
        finally:
            if job is not None:
                self.app.scheduler.cancel(job)  # no-op when it finished; stops it when this handler gave up
        if job is not None:
            waited = (job.started or time.monotonic()) - job.enqueued
            self.app.log(f"{job.id} client={job.client} {outcome} waited={waited:.3f}s total={time.monotonic() - started:.3f}s")

    def _reset_prefix_cache(self) -> None:
        """Drop the prompts kept for reuse (vLLM's route name; benchmarks call it between runs)."""
        self.close_connection = True  # whatever body came with it is not read
        if not self.app.scheduler.forget_prompts():
            raise ApiError(503, "the model did not get to the reset within 30 s; retry when it is idle", type="server_error")
        self._send_json(200, {"status": "ok"})

    # ---- answering ---------------------------------------------------------------------------

    def _whole(self, job: Job, request: ChatRequest) -> str:
        events, reply = ReplyEvents(request.parse_tools), Reply()
        while (item := self._next(job)) != DONE:
            if isinstance(item, Failed):
                raise _api_error(item.error, self.app.log)
            collect(events.take(item), reply)
        segments, calls = events.splitter.finish()
        collect(segments, reply)
        tool_calls = tool_call_objects(calls, request.tools) + events.backend_calls
        body = completion_object(job.id, self.app.model_name, int(time.time()), reply.content.strip(),
                                 reply.reasoning.strip(), tool_calls, finish_reason(events.reason, bool(tool_calls)),
                                 events.usage)
        self._send_json(200, body)
        return f"200 {events.usage.completion_tokens} tokens"

    def _stream(self, job: Job, request: ChatRequest) -> str:
        first = self._next(job)  # wait before answering 200, so early failures get a real status
        if isinstance(first, Failed):
            raise _api_error(first.error, self.app.log)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._streaming = True
        created, model = int(time.time()), self.app.model_name
        with_usage = request.include_usage

        out: list[bytes] = []

        def send(obj: dict[str, Any]) -> None:
            out.append(sse_event(json.dumps(obj, ensure_ascii=False)))

        def flush() -> None:
            # Events that are already waiting go out in one write: under load that saves a syscall
            # (and a wake-up of the client) per token.
            if out:
                self._write_chunk(b"".join(out))
                out.clear()

        def send_segments(segments: list[tuple[str, str]]) -> None:
            for kind, text in segments:
                key = "reasoning_content" if kind == "reasoning" else "content"
                send(chunk_object(job.id, model, created, {key: text}, with_usage_field=with_usage))

        send(chunk_object(job.id, model, created, {"role": "assistant", "content": ""}, with_usage_field=with_usage))
        events = ReplyEvents(request.parse_tools)
        item, failure = first, None
        while item != DONE:
            if isinstance(item, Failed):
                failure = _api_error(item.error, self.app.log)
                break
            send_segments(events.take(item))
            if job.events.empty():
                flush()
            item = self._next(job)
        segments, calls = events.splitter.finish()
        send_segments(segments)
        usage = events.usage
        if failure is not None:  # mid-stream: the status is already 200, so the error is an event
            send(failure.body())
        else:
            tool_calls = tool_call_objects(calls, request.tools) + events.backend_calls
            if tool_calls:
                send(chunk_object(job.id, model, created, {"tool_calls": [dict(call, index=i) for i, call in enumerate(tool_calls)]},
                                  with_usage_field=with_usage))
            send(chunk_object(job.id, model, created, {}, finish_reason(events.reason, bool(tool_calls)),
                              with_usage_field=with_usage))
            if with_usage:
                send(usage_chunk_object(job.id, model, created, usage))
        out.append(sse_event("[DONE]"))
        flush()
        self._write_chunk(b"")
        return f"200 stream {usage.completion_tokens} tokens" if failure is None else f"stream failed: {failure.message}"

    def _end_stream_quietly(self, error: ApiError) -> None:
        self.close_connection = True
        try:
            self._write_chunk(sse_event(json.dumps(error.body())) + sse_event("[DONE]"))
            self._write_chunk(b"")
        except ClientGone:
            pass

    def _next(self, job: Job) -> Any:
        """The job's next event; raises ClientGone as soon as the client has hung up."""
        while True:
            now = time.monotonic()
            if now - self._last_check >= DISCONNECT_CHECK_S:
                self._last_check = now
                if self._client_gone():
                    raise ClientGone()
            try:
                return job.events.get(timeout=DISCONNECT_CHECK_S)
            except queue.Empty:
                continue

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    # ---- plumbing ----------------------------------------------------------------------------

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def _authorize(self) -> None:
        """Without keys every client is the one tenant ""; with keys the token names the tenant."""
        keys = self.app.api_keys
        self.tenant = ""
        if not keys:
            return
        given = self.headers.get("Authorization", "")
        token = given[7:].strip() if given.lower().startswith("bearer ") else ""
        tenant = tenant_of(token, keys) if token else None
        if tenant is None:
            self.close_connection = True  # the body was not read
            raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                           type="authentication_error", code="invalid_api_key")
        self.tenant = tenant

    def _parse(self, body: Any) -> ChatRequest:
        """The body as a request; any failure is the body's (a 400), not the server's."""
        try:
            return parse_chat_request(body, self.app.limits)
        except ApiError:
            raise
        except Exception as exc:  # a shape the parser did not foresee: still the client's error
            self.app.log(f"request refused by the parser: {type(exc).__name__}: {exc}")
            raise ApiError(400, f"the request body could not be read ({type(exc).__name__})") from None

    def _read_json(self) -> Any:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower() or self.headers.get("Content-Length") is None:
            self.close_connection = True
            raise ApiError(411, "send the request body with a Content-Length header")
        lengths = {value.strip() for value in self.headers.get_all("Content-Length") or ()}
        if len(lengths) != 1 or not next(iter(lengths)).isdigit():  # also: two different lengths (smuggling)
            self.close_connection = True
            raise ApiError(400, "Content-Length must be one whole number of bytes")
        length = int(next(iter(lengths)))
        if length > self.app.max_request_bytes:
            self.close_connection = True
            raise ApiError(413, f"the request body is {length} bytes; this server accepts at most "
                           f"{self.app.max_request_bytes} (serve.max_request_bytes)", code="request_too_large")
        try:
            raw = self.rfile.read(length)
        except OSError:
            raise ClientGone() from None
        if len(raw) < length:
            raise ClientGone()
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

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
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
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            raise ClientGone() from None

    def _send_error(self, exc: ApiError) -> None:
        try:
            self._send_json(exc.status, exc.body(), exc.headers)
        except ClientGone:
            pass

    def _write_chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n")
            self.wfile.flush()
        except OSError:
            raise ClientGone() from None


def _api_error(error: BaseException, log: Callable[[str], None]) -> ApiError:
    if isinstance(error, ApiError):
        return error
    if isinstance(error, ContextTooLong):
        return ApiError(400, error.message, code="context_length_exceeded", param="messages")
    if isinstance(error, UsageError):  # the request asked for something this model cannot do
        return ApiError(400, error.message)
    if isinstance(error, ServerStopping):
        return ApiError(503, str(error), type="server_error", code="shutting_down")
    if isinstance(error, CloverError):
        return ApiError(500, f"the model failed: {error.message}", type="server_error", code="model_error")
    log("internal error:\n" + "".join(traceback.format_exception(type(error), error, error.__traceback__)))
    return ApiError(500, "internal error in clovercode serve (the server log has the details)", type="server_error")

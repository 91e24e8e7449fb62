"""A scripted OpenAI-compatible server on 127.0.0.1 for endpoint-backend tests.

It stands in for SGLang / vLLM at the one seam this machine cannot reach, and for the failures a
real server produces only sometimes (429, 5xx, dropped connections, stalls). Each POST takes the
next scripted reply; every request is recorded for the test to inspect.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Reply = Callable[[BaseHTTPRequestHandler], None]


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "choices": choices, **extra}


def sse(chunks: list[dict[str, Any] | str], *, done: bool = True, pause: float = 0.0) -> Reply:
    def reply(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        for item in chunks:
            data = item if isinstance(item, str) else json.dumps(item)
            handler.wfile.write(f"data: {data}\n\n".encode())
            handler.wfile.flush()
            if pause:
                time.sleep(pause)
        if done:
            handler.wfile.write(b"data: [DONE]\n\n")
    return reply


def status(code: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
    def reply(handler: BaseHTTPRequestHandler) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)
    return reply


def stall_after(chunks: list[dict[str, Any]], seconds: float) -> Reply:
    def reply(handler: BaseHTTPRequestHandler) -> None:
        sse(chunks, done=False)(handler)
        handler.wfile.flush()
        time.sleep(seconds)
    return reply


def drop() -> Reply:
    def reply(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True  # no response at all
    return reply


def error(code: int, message: str, error_code: str | None = None) -> Reply:
    return status(code, {"error": {"message": message, "type": "invalid_request_error", "code": error_code}})


def is_probe(body: dict[str, Any]) -> bool:
    """The endpoint backend's one-token request that asks whether the template renders tools."""
    return body.get("max_tokens") == 1 and (body.get("messages") or [{}])[-1] == {"role": "user", "content": "Say OK."}


class StubServer:
    """``routes``: GET paths beside /v1 (``/props``) and their JSON; others are 404. ``probe_tokens``:
    the prompt counts the tool-rendering probes get (without, with tools); the default says rendered.
    ``probe_refusal``: a 400 message for a probe with tools (a server that takes no tools)."""

    def __init__(self, models: list[str] | None = ("clover",), model_extra: dict[str, Any] | None = None,  # type: ignore[assignment]
                 routes: dict[str, Any] | None = None, probe_tokens: tuple[int, int] = (12, 1800),
                 probe_refusal: str | None = None):
        self.models = list(models) if models is not None else None
        self.model_extra = model_extra or {}
        self.routes = routes or {}
        self.probe_tokens = probe_tokens
        self.probe_refusal = probe_refusal
        self.script: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.probes: list[dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                stub.requests.append({"method": "GET", "path": self.path, "headers": dict(self.headers)})
                if self.path in stub.routes:
                    status(200, stub.routes[self.path])(self)
                elif stub.models is None or not self.path.startswith("/v1/models"):
                    status(404, {"detail": "Not Found"})(self)
                else:
                    status(200, {"object": "list", "data": [{"id": m, "object": "model", **stub.model_extra}
                                                            for m in stub.models]})(self)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if is_probe(body):
                    stub.probes.append(body)
                    if stub.probe_refusal and body.get("tools"):
                        error(400, stub.probe_refusal)(self)
                        return
                    tokens = stub.probe_tokens[1 if body.get("tools") else 0]
                    status(200, {"choices": [{"index": 0, "finish_reason": "length",
                                              "message": {"role": "assistant", "content": "OK"}}],
                                 "usage": {"prompt_tokens": tokens, "completion_tokens": 1}})(self)
                    return
                stub.requests.append({"method": "POST", "path": self.path, "headers": dict(self.headers), "body": body})
                reply = stub.script.pop(0) if stub.script else status(500, {"error": {"message": "script exhausted"}})
                reply(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False  # a stalled reply must not hold up the test
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def posts(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == "POST"]

    def __enter__(self) -> "StubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

"""`clovercode serve` over real HTTP on 127.0.0.1, checked by the official `openai` client."""

import http.client
import json
import socket
import threading

import openai
import pytest
from serve_helpers import EchoBackend, EchoBatchBackend, running_server, wait_for

from clovercode.toolcalls.schemas import load_tool_specs

TOOLS = [s.openai_tool() for s in load_tool_specs(names=["view_file", "list_files"])]


@pytest.fixture(scope="module")
def echo_app():
    with running_server(EchoBackend()) as app:
        yield app


def client(app, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{app.port}/v1", api_key=key, max_retries=0, timeout=20)


def raw(app, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, dict, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", app.port, timeout=20)
    conn.request(method, path, body, headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, dict(response.getheaders()), json.loads(data) if data else {}


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_non_streaming_reply_with_usage():
    with running_server(EchoBackend()) as app:
        reply = client(app).chat.completions.create(model="test-model", messages=user("hello there"))
    assert reply.choices[0].message.content == "echo: hello there"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "test-model" and reply.id.startswith("chatcmpl-")
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (11, 17, 28)


def test_streaming_reply_matches_and_ends_with_usage():
    with running_server(EchoBackend()) as app:
        chunks = list(client(app).chat.completions.create(model="test-model", messages=user("stream me"), stream=True,
                                                          stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: stream me"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len("echo: stream me")
    assert len({c.id for c in chunks}) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_tools_in_tool_calls_out(stream):
    with running_server(EchoBackend()) as app:
        result = client(app).chat.completions.create(model="test-model", messages=user("CALL:view_file"), tools=TOOLS,
                                                     stream=stream)
        if stream:
            chunks = list(result)
            calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        else:
            message = result.choices[0].message
            calls, content, finish = message.tool_calls, message.content, result.choices[0].finish_reason
            reasoning = message.model_extra["reasoning_content"]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("view_file", {"path": "a.py", "start_line": 2})]
    assert calls[0].id.startswith("call_") and calls[0].type == "function"
    assert content.strip() == "Sure." and reasoning.strip() == "calling view_file"
    assert finish == "tool_calls"


def test_without_tools_the_call_text_is_plain_content():
    with running_server(EchoBackend()) as app:
        reply = client(app).chat.completions.create(model="test-model", messages=user("CALL:view_file"))
    assert reply.choices[0].message.tool_calls is None
    assert "<tool_call>" in reply.choices[0].message.content


def test_models_and_health():
    with running_server(EchoBackend()) as app:
        models = client(app).models.list()
        status, _, health = raw(app, "GET", "/health")
    assert [m.id for m in models.data] == ["test-model"]
    assert models.data[0].model_extra["max_model_len"] == 4096
    assert status == 200 and health["status"] == "ok" and health["queued"] == 0


def test_api_key_is_required_when_set_but_health_is_open():
    with running_server(EchoBackend(), api_key="s3cret") as app:
        with pytest.raises(openai.AuthenticationError, match="missing or wrong API key"):
            client(app, "wrong").chat.completions.create(model="test-model", messages=user("x"))
        with pytest.raises(openai.AuthenticationError):
            client(app, "wrong").models.list()
        assert client(app, "s3cret").chat.completions.create(model="test-model", messages=user("x")).choices
        assert raw(app, "GET", "/health")[0] == 200


def test_errors_reach_the_client_as_openai_errors():
    with running_server(EchoBackend()) as app:
        c = client(app)
        with pytest.raises(openai.NotFoundError) as info:
            c.chat.completions.create(model="gpt-4", messages=user("x"))
        assert info.value.code == "model_not_found" and "'gpt-4' does not exist" in info.value.message
        with pytest.raises(openai.BadRequestError) as info:
            c.chat.completions.create(model="test-model", messages=user("x"), temperature=7)
        assert info.value.param == "temperature"
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as info:
                result = c.chat.completions.create(model="test-model", messages=user("HUGE"), stream=stream)
                list(result) if stream else None
            assert info.value.code == "context_length_exceeded" and "context window is 4096" in info.value.message


def test_a_failure_mid_stream_is_an_error_event_and_the_server_goes_on():
    with running_server(EchoBackend()) as app:
        c = client(app)
        received = []
        with pytest.raises(openai.APIError, match="the GPU fell over"):
            for chunk in c.chat.completions.create(model="test-model", messages=user("BREAK please"), stream=True):
                received.append(chunk)
        assert received  # the reply had started
        with pytest.raises(openai.InternalServerError, match="the GPU fell over"):
            c.chat.completions.create(model="test-model", messages=user("BREAK again"))
        assert c.chat.completions.create(model="test-model", messages=user("ok")).choices[0].message.content == "echo: ok"


def test_request_size_routes_and_methods():
    with running_server(EchoBackend(), max_request_bytes=2000) as app:
        big = json.dumps({"model": "test-model", "messages": user("x" * 5000)}).encode()
        status, headers, body = raw(app, "POST", "/v1/chat/completions", big, {"Content-Type": "application/json"})
        assert status == 413 and body["error"]["code"] == "request_too_large" and headers["Connection"] == "close"
        assert raw(app, "POST", "/v1/chat/completions", b"{not json", {"Content-Type": "application/json"})[0] == 400
        assert raw(app, "GET", "/v1/chat/completions")[0] == 405
        assert raw(app, "GET", "/v2/anything")[0] == 404


def test_queue_limit_answers_429_with_retry_after():
    with running_server(EchoBackend(delay=0.05), max_queue=1) as app:
        c = client(app)
        results: list = []

        def call(i: int) -> None:
            try:
                results.append(c.chat.completions.create(model="test-model", messages=user(f"job {i} " * 3), user=f"u{i}"))
            except openai.RateLimitError as exc:
                results.append(exc)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        refused = [r for r in results if isinstance(r, openai.RateLimitError)]
        assert refused and len(refused) < 5
        assert refused[0].response.headers["Retry-After"] == "1"
        assert raw(app, "GET", "/health")[2]["rejected"] == len(refused)


def _start_stream(app, text: str) -> socket.socket:
    body = json.dumps({"model": "test-model", "stream": True, "messages": user(text)}).encode()
    sock = socket.create_connection(("127.0.0.1", app.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def test_a_client_that_hangs_up_mid_stream_cancels_its_generation():
    backend = EchoBackend(delay=0.05)
    with running_server(backend) as app:
        sock = _start_stream(app, "a very long reply " * 30)
        assert b"200 OK" in sock.recv(4096)
        sock.close()
        assert wait_for(lambda: backend.closed_early == 1)
        assert wait_for(lambda: raw(app, "GET", "/health")[2]["cancelled"] == 1)
        backend.delay = 0.0
        assert client(app).chat.completions.create(model="test-model", messages=user("next")).choices[0].message.content == "echo: next"


def test_a_client_that_hangs_up_while_queued_never_runs():
    backend = EchoBackend(delay=0.05)
    with running_server(backend) as app:
        busy = _start_stream(app, "keeps the model busy " * 10)
        assert b"200 OK" in busy.recv(4096)
        waiting = _start_stream(app, "gives up while waiting")
        assert wait_for(lambda: raw(app, "GET", "/health")[2]["queued"] == 1)
        waiting.close()  # it leaves the queue at once, freeing its place
        assert wait_for(lambda: raw(app, "GET", "/health")[2]["cancelled"] == 1)
        assert raw(app, "GET", "/health")[2]["queued"] == 0
        busy.close()
        assert wait_for(lambda: raw(app, "GET", "/health")[2]["cancelled"] == 2)
        assert backend.started == 1


def test_concurrent_clients_on_a_batching_backend_get_their_own_replies():
    backend = EchoBatchBackend()
    with running_server(backend, max_batch=4) as app:
        c = client(app)
        replies: dict[int, str] = {}

        def call(i: int) -> None:
            stream = c.chat.completions.create(model="test-model", messages=user(f"bot {i} asks {i * 17}"), stream=True,
                                               user=f"bot{i}")
            replies[i] = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert replies == {i: f"echo: bot {i} asks {i * 17}" for i in range(8)}
    assert max(backend.widths) > 1


@pytest.mark.parametrize("body", [
    {"messages": [{"role": ["user"], "content": "x"}]},
    {"messages": [{"role": "user", "content": {"a": 1}}]},
    {"messages": [{"role": "assistant", "tool_calls": [None]}]},
    {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": 3}}]}]},
    {"messages": [{"role": "user", "content": "x"}], "tools": "all"},
    {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
    {"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function"}},
    {"messages": [{"role": "user", "content": "x"}], "stream": "yes"},
    {"messages": [{"role": "user", "content": "x"}], "stream_options": [1]},
    {"messages": [{"role": "user", "content": "x"}], "max_tokens": True},
    {"messages": [{"role": "user", "content": "x"}], "seed": "7"},
    {"messages": [{"role": "user", "content": "x"}], "model": 5},
    {"messages": "hello"},
    [1, 2],
    "text",
    None,
])
def test_malformed_requests_get_400_not_500(echo_app, body):
    status, _, answer = raw(echo_app, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                            {"Content-Type": "application/json"})
    assert status == 400, answer
    assert answer["error"]["type"] == "invalid_request_error" and answer["error"]["message"]


def test_connections_beyond_the_limit_get_an_immediate_503():
    with running_server(EchoBackend(), max_connections=2) as app:
        idle = [socket.create_connection(("127.0.0.1", app.port)) for _ in range(2)]  # accepted first: FIFO backlog
        third = socket.create_connection(("127.0.0.1", app.port))
        third.settimeout(5)
        assert third.recv(4096).startswith(b"HTTP/1.1 503")
        third.close()
        idle[0].close()
        assert wait_for(lambda: _status_ok(app))
        idle[1].close()


def _status_ok(app) -> bool:
    try:
        return raw(app, "GET", "/health")[0] == 200
    except OSError:
        return False


class Forgetting:
    """Records where and how often the kept prompts were dropped."""

    def __init__(self):
        self.calls = []

    def forget_prompts(self, scope=None):
        self.calls.append((threading.get_ident(), scope))


class ForgettingEcho(EchoBackend, Forgetting):
    def __init__(self):
        EchoBackend.__init__(self)
        Forgetting.__init__(self)


class ForgettingBatch(EchoBatchBackend, Forgetting):
    def __init__(self):
        EchoBatchBackend.__init__(self)
        Forgetting.__init__(self)


@pytest.mark.parametrize("backend_type,max_batch", [(ForgettingEcho, 1), (ForgettingBatch, 4)], ids=["serial", "batched"])
def test_reset_prefix_cache_drops_the_kept_prompts_on_the_model_loop(backend_type, max_batch):
    backend = backend_type()
    with running_server(backend, max_batch=max_batch, api_key="k") as app:
        assert raw(app, "POST", "/reset_prefix_cache")[0] == 401  # an operator's route: the key is needed
        assert backend.calls == []
        status, _, body = raw(app, "POST", "/v1/reset_prefix_cache", b"{}", {"Authorization": "Bearer k",
                                                                              "Content-Length": "2"})
        assert (status, body) == (200, {"status": "ok"})
        [(thread, scope)] = backend.calls
        assert thread != threading.get_ident()  # the model loop did it
        assert scope == "7:default/"  # only the caller's tenant's prompts (trust/serve.py: tenant_scope_prefix)
        assert client(app, "k").chat.completions.create(model="test-model", messages=user("after")).choices
        status, headers, _ = raw(app, "GET", "/reset_prefix_cache", headers={"Authorization": "Bearer k"})
        assert (status, headers["Allow"]) == (405, "POST")


def _handler_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "process_request_thread" in t.name}


def test_closing_the_server_ends_idle_keep_alive_connections_and_their_threads():
    """A handler thread left waiting for a keep-alive client's next request holds the app (and its
    model) past the server's life: at interpreter exit one aborted the process (ServeHTTPServer.server_close)."""
    before = _handler_threads()
    with running_server(EchoBackend()) as app:
        conn = http.client.HTTPConnection("127.0.0.1", app.port, timeout=10)
        conn.request("GET", "/health")
        response = conn.getresponse()
        assert response.status == 200 and response.read() and not response.will_close  # kept alive
        [handler] = _handler_threads() - before
    assert not handler.is_alive()  # server_close waited for it
    conn.sock.settimeout(10)
    assert conn.sock.recv(1) == b""  # and the server ended the connection, not the client
    conn.close()

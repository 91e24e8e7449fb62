"""Attacks on `clovercode serve` by its own HTTP clients (docs/security.md, "Trust: clients of
clovercode serve"): each reproduced against a real server on 127.0.0.1.

- slow clients holding half-sent headers take every connection slot;
- a client learns from `cached_tokens` whether another client sent a prompt;
- one client fills the whole queue and starves the others;
- a bad body gets a traceback, an HTML page or a dropped connection instead of a JSON 4xx.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from dataclasses import replace as dataclasses_replace
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import cli_env, run_cli
from serve_helpers import EchoBackend, client, running_server, serve


TINY = "tiny:context=512"
ALICE, BOB = "sk-alice-0123456789", "sk-bob-9876543210"


def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys"
    path.write_text(f"# tenants of this server\nalice {ALICE}\nbob {BOB}\n")
    path.chmod(0o600)
    return path


def exchange(port: int, data: bytes, timeout: float = 20) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read one HTTP response (the server must answer, not hang up)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()


def post(port: int, body: bytes, key: str = ALICE, content_type: str = "application/json",
         extra: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n").encode()
    return exchange(port, head + extra + b"Connection: close\r\n\r\n" + body)


# ---- the bind rule ---------------------------------------------------------------------------

def test_loopback_rule():
    from clovercode.trust.serve import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.9.1", "::1", "localhost", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "", "192.168.1.4", "example.com", "localhost.evil.com"))


def test_a_non_loopback_bind_without_a_key_is_refused():
    env = cli_env()
    for name in ("CLOVERCODE_SERVE_API_KEY", "CLOVERCODE_SERVE_API_KEYS_FILE"):
        env.pop(name, None)
    result = run_cli("serve", "--model", TINY, "--host", "0.0.0.0", "--port", "0", env=env, timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "API key" in result.stderr and "--api-key" in result.stderr
    assert "Traceback" not in result.stderr and "listening" not in result.stdout


def test_keys_file_rules(tmp_path):
    from clovercode.trust.serve import read_keys_file

    path = keys_file(tmp_path)
    assert read_keys_file(path) == {ALICE: "alice", BOB: "bob"}
    path.write_text("alice sk-same-key-1234567\nbob sk-same-key-1234567\n")
    with pytest.raises(Exception, match="twice"):
        read_keys_file(path)
    path.write_text("alice short\n")
    with pytest.raises(Exception, match="at least"):
        read_keys_file(path)
    path.write_text(f"alice {ALICE}\n")
    path.chmod(0o644)
    with pytest.raises(Exception, match="chmod 600"):
        read_keys_file(path)


def test_cache_scope_separates_tenants_and_client_keys():
    from clovercode.trust.serve import cache_scope

    scopes = {cache_scope("alice", None), cache_scope("bob", None), cache_scope("alice", "x"),
              cache_scope("alice", "y"), cache_scope("alice\x00x", None)}
    assert len(scopes) == 5
    assert cache_scope("", None) == ""  # one tenant, no key: the cache is shared as before


# ---- slow clients ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory) -> Iterator[int]:
    """A real `clovercode serve` with two keys, 6 connection slots and a 1 s header timeout."""
    env = cli_env(CLOVERCODE_SERVE_MAX_CONNECTIONS="6", CLOVERCODE_SERVE_HEADER_TIMEOUT="1",
                  CLOVERCODE_MAX_NEW_TOKENS="8",
                  CLOVERCODE_SERVE_API_KEYS_FILE=str(keys_file(tmp_path_factory.mktemp("keys"))))
    with serve("--model", TINY, env=env) as (url, _):
        yield int(url.rsplit(":", 1)[1].split("/")[0])


def _dribble(sock: socket.socket, until: float) -> None:
    """A slow-loris client: a header line now and then, never the blank line that ends them."""
    try:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        while time.monotonic() < until:
            time.sleep(0.3)
            sock.sendall(b"X-Slow: 1\r\n")
    except OSError:
        pass  # the server hung up on it: the defence


def test_slow_clients_holding_half_sent_headers_do_not_lock_out_real_clients(tiny_server):
    until = time.monotonic() + 6
    slow = [socket.create_connection(("127.0.0.1", tiny_server), timeout=10) for _ in range(6)]
    threads = [threading.Thread(target=_dribble, args=(s, until), daemon=True) for s in slow]
    for t in threads:
        t.start()
    try:
        time.sleep(2.0)  # past the 1 s header timeout, dribbling all along
        reply = client(f"http://127.0.0.1:{tiny_server}/v1", ALICE).chat.completions.create(
            model=TINY, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert reply.choices[0].finish_reason in ("stop", "length")
        for sock in slow:  # each slow connection was closed by the server, long before 120 s
            sock.settimeout(5)
            try:
                assert sock.recv(1024) == b""
            except ConnectionResetError:
                pass
    finally:
        for sock in slow:
            sock.close()


def test_an_idle_keep_alive_connection_is_closed_after_the_header_timeout(tiny_server):
    with socket.create_connection(("127.0.0.1", tiny_server), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        response = http.client.HTTPResponse(sock)
        response.begin()
        assert response.status == 200 and json.loads(response.read())["status"] == "ok"
        started = time.monotonic()
        assert sock.recv(1024) == b""  # closed by the server while idle
        assert time.monotonic() - started < 5


# ---- bad bodies --------------------------------------------------------------------------------

BASE: dict[str, Any] = {"model": TINY, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
DEEP = "[" * 50_000 + "]" * 50_000
SHAPES: list[Any] = [
    [], 1, "x", None, True,
    {"messages": "hi"}, {"messages": {}}, {"messages": []}, {"messages": [1]}, {"messages": [None]},
    {"messages": [{"role": 5}]}, {"messages": [{"role": ["user"], "content": "x"}]},
    {"messages": [{"role": "user", "content": 5}]}, {"messages": [{"role": "user", "content": {"a": 1}}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"messages": [{"role": "user", "content": [None, 5]}]},
    {"messages": [{"role": "assistant", "content": "x", "tool_calls": "x"}, {"role": "user", "content": "x"}]},
    {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": DEEP}}]},
                  {"role": "user", "content": "x"}]},
    {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 5}}]}]},
    {"messages": [{"role": "tool", "content": "x", "tool_call_id": [1], "name": {"a": 1}}]},
    {"messages": [{"role": "user", "content": "x", "reasoning_content": ["x"]}]},
    {"max_tokens": -1}, {"max_tokens": 0}, {"max_tokens": 1.5}, {"max_tokens": "5"}, {"max_tokens": True},
    {"max_tokens": 10 ** 400}, {"max_tokens": -10 ** 400}, {"max_completion_tokens": [4]},
    {"temperature": "hot"}, {"temperature": -1}, {"temperature": 10 ** 400}, {"top_p": []}, {"top_p": 2},
    {"stop": 5}, {"stop": ["a"] * 17}, {"stop": [1]}, {"stop": {"a": 1}},
    {"seed": 10 ** 30}, {"seed": -10 ** 30}, {"seed": "x"}, {"seed": 1.5},
    {"tools": "x"}, {"tools": [1]}, {"tools": [{"type": "function", "function": {"name": ""}}]},
    {"tools": [{"function": {"name": "f", "parameters": []}}]}, {"tools": [{"type": "retrieval"}]},
    {"tool_choice": 5}, {"tool_choice": []}, {"tool_choice": {"function": {"name": 5}}}, {"tool_choice": "required"},
    {"response_format": "json"}, {"response_format": {"type": "json_schema"}}, {"response_format": {"type": []}},
    {"response_format": {"type": "json_schema", "json_schema": {"schema": []}}},
    {"stream": "yes"}, {"stream_options": 5}, {"stream_options": []}, {"n": 2}, {"n": "x"},
    {"model": 5}, {"model": "other-model"}, {"model": ["x"]}, {"user": 5}, {"chat_template_kwargs": "x"},
    {"chat_template_kwargs": {"enable_thinking": "yes"}},
    {"prompt_cache_key": 5}, {"prompt_cache_key": "k" * 10_000}, {"cache_salt": {"a": 1}},
    {"messages": [{"role": "user", "content": "x" * 100_000}]},
]


def _check_json_answer(status: int, headers: dict[str, str], data: bytes, what: str) -> None:
    assert status == 200 or 400 <= status < 500, (what, status, data[:300])
    assert headers.get("content-type", "").startswith("application/json"), (what, headers, data[:300])
    body = json.loads(data)
    if status != 200:
        error = body["error"]
        assert isinstance(error["message"], str) and error["message"] and "Traceback" not in error["message"], what
        assert set(error) >= {"message", "type", "param", "code"}, what


@pytest.mark.parametrize("index", range(len(SHAPES)))
def test_a_bad_json_body_gets_a_json_4xx(tiny_server, index):
    shape = SHAPES[index]
    body = dict(BASE, **shape) if isinstance(shape, dict) else shape
    data = json.dumps(body).encode()
    status, headers, answer = post(tiny_server, data)
    _check_json_answer(status, headers, answer, repr(shape)[:200])


RAW: list[tuple[str, bytes]] = [
    ("not JSON", b"{"),
    ("JSON with trailing junk", b'{"messages": []} x'),
    ("not UTF-8", b'{"messages": [{"role": "user", "content": "\xff\xfe\xfa"}]}'),
    ("a lone surrogate", b'{"messages": [{"role": "user", "content": "\\ud800 hi"}], "max_tokens": 4}'),
    ("NaN", b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}'),
    ("Infinity", b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": Infinity}'),
    ("nested arrays", DEEP.encode()),
    ("nested objects", b'{"a":' * 30_000 + b"1" + b"}" * 30_000),
    ("form data", b"messages=hi&model=x"),
    ("empty", b""),
]


@pytest.mark.parametrize("what,body", RAW, ids=[w for w, _ in RAW])
def test_a_body_that_is_not_json_gets_a_json_4xx(tiny_server, what, body):
    content_type = "application/x-www-form-urlencoded" if what == "form data" else "application/json"
    _check_json_answer(*post(tiny_server, body, content_type=content_type), what)


REQUESTS: list[tuple[str, bytes]] = [
    ("garbage request line", b"HELLO\r\n\r\n"),
    ("unknown method", b"BREW /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    ("negative length", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ALICE.encode()
     + b"\r\nContent-Length: -5\r\n\r\n{}"),
    ("length not a number", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ALICE.encode()
     + b"\r\nContent-Length: 1e3\r\n\r\n{}"),
    ("two lengths", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ALICE.encode()
     + b"\r\nContent-Length: 2\r\nContent-Length: 900\r\n\r\n{}"),
    ("no length", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ALICE.encode()
     + b"\r\nConnection: close\r\n\r\n"),
    ("huge header", b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"),
    ("too many headers", b"GET /v1/models HTTP/1.1\r\n" + b"X-A: 1\r\n" * 200 + b"\r\n"),
    ("binary path", b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("no key", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"),
    ("wrong key", b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-alice-0123456780\r\n\r\n"),
]


@pytest.mark.parametrize("what,data", REQUESTS, ids=[w for w, _ in REQUESTS])
def test_a_malformed_request_gets_a_json_4xx(tiny_server, what, data):
    status, headers, body = exchange(tiny_server, data)
    assert status not in (200, 201), what
    _check_json_answer(status, headers, body, what)


# ---- queue fairness ----------------------------------------------------------------------------

def _ask(app: Any, key: str, text: str, out: dict[str, Any]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", app.port, timeout=30)
    body = json.dumps({"messages": [{"role": "user", "content": text}]})
    conn.request("POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {key}",
                                                         "Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    out[text] = (response.status, time.monotonic())
    conn.close()


def test_one_key_cannot_fill_the_queue_and_keys_take_turns():
    backend = EchoBackend(delay=0.1)  # "echo: aN" is 3 chunks: about 0.3 s a request, one at a time
    with running_server(backend, max_batch=1, max_queue=8, api_keys={ALICE: "alice", BOB: "bob"}) as app:
        results: dict[str, Any] = {}
        flood = [threading.Thread(target=_ask, args=(app, ALICE, f"a{i}", results)) for i in range(12)]
        for t in flood:
            t.start()
            time.sleep(0.01)
        time.sleep(0.1)  # alice's flood is queued (or refused) before bob comes
        bob = [threading.Thread(target=_ask, args=(app, BOB, f"b{i}", results)) for i in range(2)]
        for t in bob:
            t.start()
        for t in flood + bob:
            t.join(30)
    alice = {k: v for k, v in results.items() if k.startswith("a")}
    refused = [k for k, (status, _) in alice.items() if status == 429]
    assert refused, "alice alone filled the queue"
    assert all(results[f"b{i}"][0] == 200 for i in range(2)), results  # bob is never refused
    served = [v[1] for k, v in alice.items() if v[0] == 200]
    # round-robin: bob's requests do not wait behind all of alice's queued ones
    assert max(results["b0"][1], results["b1"][1]) < max(served), results


# ---- prompt cache --------------------------------------------------------------------------------

@pytest.mark.parametrize("max_batch", ["1", "4"], ids=["one-at-a-time", "batched"])
def test_cached_tokens_do_not_reveal_another_clients_prompt(tmp_path, max_batch):
    secret = [{"role": "system", "content": "You fix failing CI jobs."},
              {"role": "user", "content": "the deploy key for acme-payments leaked in build 4411"}]
    env = cli_env(CLOVERCODE_SERVE_API_KEYS_FILE=str(keys_file(tmp_path)))
    with serve("--model", "clover-tiny", "--max-batch", max_batch, env=env) as (url, _):
        def usage(key: str, **extra: Any) -> Any:
            return client(url, key).chat.completions.create(model="clover-tiny", messages=secret, max_tokens=4,
                                                            temperature=0, extra_body=extra or None).usage

        assert usage(ALICE).prompt_tokens_details.cached_tokens == 0
        probe = usage(BOB)  # bob guesses alice's prompt: a hit would say she sent it
        assert probe.prompt_tokens_details.cached_tokens == 0
        again = usage(ALICE)  # within one key the cache still works
        assert again.prompt_tokens_details.cached_tokens == again.prompt_tokens == probe.prompt_tokens
        # a client may narrow its own namespace further (OpenAI's prompt_cache_key, vLLM's cache_salt)
        assert usage(ALICE, prompt_cache_key="ticket-7").prompt_tokens_details.cached_tokens == 0
        assert usage(ALICE, cache_salt="s1").prompt_tokens_details.cached_tokens == 0
        assert usage(ALICE, cache_salt="s1").prompt_tokens_details.cached_tokens > 0


# ---- the engine seam -----------------------------------------------------------------------------

def test_requests_of_different_scopes_admitted_together_reuse_only_their_own_prompt():
    """The batched path: alice's kept prompt is reused by alice's next request, and not by bob's
    identical one admitted in the same call (BatchDecoder groups an admission by cache scope)."""
    from tinymodels import EOS_ID, MASK_ID, tiny_qwen3

    from clovercode.engine.batchdecode import BatchDecoder, Request
    from clovercode.engine.batchdenoiser import SlotBatchDenoiser
    from clovercode.engine.decoder import DecodePlan
    from clovercode.engine.stops import Stops

    plan = DecodePlan(block_size=4, mask_id=MASK_ID, max_new_tokens=4)
    alice, bob = (dataclasses_replace(plan, cache_scope=cache) for cache in ("alice", "bob"))
    stops = Stops(frozenset({EOS_ID}))
    decoder = BatchDecoder(SlotBatchDenoiser(tiny_qwen3(), 4, keep_tokens=1000), lambda ids: " ".join(map(str, ids)))
    prompt = list(range(3, 40))
    decoder.add("first", prompt, alice, stops)
    first = decoder.active["first"].stats.cached_tokens
    decoder.add_many([Request("bob", prompt, bob, stops), Request("again", prompt, alice, stops)])
    assert first == 0
    assert decoder.active["bob"].stats.cached_tokens == 0
    assert decoder.active["again"].stats.cached_tokens == len(prompt)


def test_a_live_requests_prompt_opening_is_copied_only_by_its_own_tenant():
    """The batched path also copies the opening a new prompt shares with a prompt still decoding
    (SlotBatchDenoiser._live_opening): never across scopes, where bob's cached tokens (and speed)
    would tell him what alice is sending right now."""
    from tinymodels import EOS_ID, MASK_ID, tiny_qwen3

    from clovercode.engine.batchdecode import BatchDecoder
    from clovercode.engine.batchdenoiser import SlotBatchDenoiser
    from clovercode.engine.decoder import DecodePlan
    from clovercode.engine.stops import Stops

    plan = DecodePlan(block_size=4, mask_id=MASK_ID, max_new_tokens=8)
    alice, bob = (dataclasses_replace(plan, cache_scope=cache) for cache in ("alice", "bob"))
    stops = Stops(frozenset({EOS_ID}))
    decoder = BatchDecoder(SlotBatchDenoiser(tiny_qwen3(), 4), lambda ids: " ".join(map(str, ids)))
    secret = list(range(3, 40))
    decoder.add("alice", secret + [41], alice, stops)
    decoder.add("bob", secret + [42], bob, stops)  # bob guesses how alice's prompt opens
    decoder.add("alice-again", secret + [43], alice, stops)
    assert decoder.active["bob"].stats.cached_tokens == 0
    assert decoder.active["alice-again"].stats.cached_tokens == len(secret)

"""Admission by the memory plan in a real `clovercode serve` (clover-tiny on 127.0.0.1): with
engine.max_context = 256 and engine.max_batch_tokens = 1024 the plan holds two slots of 512 positions,
so of four concurrent requests two decode while the others wait in the queue and all are answered;
a prompt longer than max_context is refused with an HTTP 400 JSON error that gives the figures,
and the server goes on serving."""

from __future__ import annotations

import http.client
import json
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import pytest
from conftest import cli_env
from serve_helpers import serve



MODEL = "clover-tiny"


def _call(base: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    url = urlparse(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Content-Type": "application/json"} if body is not None else {})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def _chat(base: str, text: str, max_tokens: int = 16) -> tuple[int, dict]:
    return _call(base, "POST", "/v1/chat/completions", {"model": MODEL, "max_tokens": max_tokens, "temperature": 0,
                                                        "messages": [{"role": "user", "content": text}]})


@pytest.mark.slow
def test_the_plan_limits_the_batch_queues_the_rest_and_refuses_what_never_fits():
    env = cli_env(CLOVERCODE_ENGINE_MAX_CONTEXT="256", CLOVERCODE_ENGINE_MAX_BATCH_TOKENS="1024")
    with serve("--model", MODEL, "--max-batch", "4", env=env) as (base, proc):
        status, health = _call(base, "GET", "/health")
        assert status == 200 and health["max_batch"] == 2  # two slots of 256 + a block, in 512-position chunks

        questions = [f"Show me module_{i}.py." for i in range(4)]
        alone = [_chat(base, q) for q in questions]
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(lambda q: _chat(base, q), questions))
        for (s1, one), (s2, many) in zip(alone, together):
            assert s1 == s2 == 200
            assert one["choices"][0]["message"] == many["choices"][0]["message"]
        status, health = _call(base, "GET", "/health")
        assert health["failed"] == 0 and health["completed"] == 8 and health["rejected"] == 0
        assert health["mean_batch"] is not None and health["mean_batch"] <= 2

        status, refused = _chat(base, "word " * 400)
        assert status == 400
        error = refused["error"]
        assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
        # max_model_len is the applied limit: the messages alone are over it, refused before the queue
        assert error["message"].startswith("This model's maximum context length is 256 tokens.")
        assert "engine.max_context = 256 tokens" in error["message"]
        prompt_tokens = int(error["message"].split("tokens (", 1)[1].split(" in the messages", 1)[0])
        assert prompt_tokens > 256
        assert "context window is 4096" in error["message"]

        status, after = _chat(base, questions[0])  # the server goes on
        assert status == 200 and after["choices"][0]["message"] == alone[0][1]["choices"][0]["message"]
    assert "memory plan: 2 slots × 512 tokens" in proc.stderr.read()


class PlannedEcho:
    """An echo batching backend whose memory plan holds two slots."""

    def __init__(self):
        from serve_helpers import EchoBatchBackend

        self.inner = EchoBatchBackend(delay=0.01)
        self.name, self.context_window = "echo", 4096
        self.asked: list[int] = []

    def batch_slots(self, max_batch: int) -> int:
        self.asked.append(max_batch)
        return 2

    def open_batch(self, max_batch: int):
        return self.inner.open_batch(max_batch)  # its add asserts it is never given more than max_batch

    def generate(self, *args):
        return self.inner.generate(*args)

    def close(self) -> None:
        pass


def test_the_scheduler_decodes_no_more_than_the_planned_slots_and_queues_the_rest():
    from serve_helpers import running_server

    backend = PlannedEcho()
    with running_server(backend, max_batch=8) as app:
        base = f"http://127.0.0.1:{app.port}"
        with ThreadPoolExecutor(6) as pool:
            replies = list(pool.map(lambda i: _call(base, "POST", "/v1/chat/completions", {
                "model": "test-model", "messages": [{"role": "user", "content": f"request number {i}"}]}), range(6)))
        assert all(status == 200 for status, _ in replies)
        assert backend.asked == [8] and app.scheduler.max_batch == 2
        assert max(backend.inner.widths) == 2  # two decoded together, never more: the others waited
        assert _call(base, "GET", "/health")[1]["max_batch"] == 2

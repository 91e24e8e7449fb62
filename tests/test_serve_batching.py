"""The embedded engine batched under `clovercode serve`: the BatchSession contract of
``EmbeddedBackend.open_batch`` on clover-tiny, and concurrent HTTP clients on 127.0.0.1 decoded in one
batch whose replies are the ones each gets from the unbatched path."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from rich.console import Console
from serve_helpers import client, running_server

from clovercode.backends.base import ContextTooLong, Finish, GenerationParams, TextDelta, Usage
from clovercode.backends.embedded import EmbeddedBackend
from clovercode.engine.config import EngineConfig
from clovercode.engine.engine import Engine
from clovercode.ground.messages import Message

pytestmark = pytest.mark.slow

REQUESTS = ["Show me lines 10 to 30 of src/app.py", "Run the tests in tests/test_api.py",
            "Find where parse_config is defined", "List the files in docs/", "Finish: the bug is fixed"]


@pytest.fixture(scope="module")
def backend():
    # Closed here, on the main thread: the model's tensors must not wait for whichever thread happens
    # to drop the last reference (see ServeHTTPServer.server_close).
    backend = EmbeddedBackend(Engine.open("clover-tiny", EngineConfig(), Console(file=open("/dev/null", "w"))))
    yield backend
    backend.close()


class Unbatched:
    """The same backend without open_batch: serve runs it one request at a time through generate()."""

    def __init__(self, backend):
        self.backend, self.name, self.context_window = backend, backend.name, backend.context_window

    def generate(self, messages, tools, params):
        return self.backend.generate(messages, tools, params)

    def close(self):
        pass


def test_a_batch_session_gives_each_request_the_events_generate_gives_it(backend):
    params = GenerationParams(max_new_tokens=70, temperature=0.0, thinking=False)
    session = backend.open_batch(4)
    events = {r: [] for r in REQUESTS[:3]}
    # two join together (one prefill forward), with one that cannot join and fails alone; one joins later
    # (a constrained request joins the batch too since issue 48: tests/test_batch_constrained.py)
    failures = session.add_many([(r, [Message("user", r)], (), params) for r in REQUESTS[:2]] + [
        ("huge", [Message("user", "word " * 5000)], (), params)])
    assert sorted(failures) == ["huge"] and isinstance(failures["huge"], ContextTooLong)
    session.add(REQUESTS[2], [Message("user", REQUESTS[2])], (), params)
    with pytest.raises(ContextTooLong, match="does not fit the context window"):
        session.add("huge", [Message("user", "word " * 5000)], (), params)
    widths = 0
    while any(not e or not isinstance(e[-1], Finish) for e in events.values()):
        widths += 1
        for key, event in session.step():
            events[key].append(event)
        assert widths < 500
    session.close()
    for request, got in events.items():
        alone = list(backend.generate([Message("user", request)], (), params))
        assert isinstance(got[0], Usage) and got[0].prompt_tokens == alone[0].prompt_tokens and not got[0].completion_tokens
        assert [type(e) for e in got[-2:]] == [Usage, Finish] and got[-1] == alone[-1]
        text = "".join(e.text for e in got if isinstance(e, TextDelta))
        assert text and text == "".join(e.text for e in alone if isinstance(e, TextDelta)), request
        assert (got[-2].completion_tokens, got[-2].forwards) == (alone[-2].completion_tokens, alone[-2].forwards)
        assert all(isinstance(e, TextDelta) for e in got[1:-2])


def ask(url, request):
    reply = client(url).chat.completions.create(model="test-model", messages=[{"role": "user", "content": request}],
                                                max_tokens=70, temperature=0)
    return reply.choices[0].message.model_dump(), reply.choices[0].finish_reason, reply.usage.completion_tokens


def test_concurrent_http_clients_are_batched_and_get_their_unbatched_replies(backend):
    with running_server(Unbatched(backend), max_batch=8) as app:
        url = f"http://127.0.0.1:{app.port}/v1"
        alone = [ask(url, r) for r in REQUESTS]
    with running_server(backend, max_batch=8) as app:
        url = f"http://127.0.0.1:{app.port}/v1"
        with ThreadPoolExecutor(len(REQUESTS)) as pool:
            together = list(pool.map(lambda r: ask(url, r), REQUESTS))
        with urllib.request.urlopen(f"http://127.0.0.1:{app.port}/health") as response:
            health = json.loads(response.read())
    assert together == alone
    assert all(tokens > 0 for _, _, tokens in together)
    assert health["completed"] == len(REQUESTS) and health["mean_batch"] > 1.5, health

"""A real `clovercode serve` subprocess on 127.0.0.1, used by the official `openai` client, by the
endpoint backend, and by `clovercode fix --endpoint`."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import urllib.request
from typing import Iterator

import openai
import pytest
from conftest import EXAMPLES, cli_env, run_cli
from serve_helpers import client, serve, wait_for

from clovercode.ground.messages import Message
from clovercode.backends.base import ContextTooLong, GenerationParams, TextDelta, Usage
from clovercode.backends.endpoint import EndpointBackend, EndpointOptions
from clovercode.backends.tiny import TinyBackend, parse_spec
from clovercode.ground.errors import ModelUnavailable
from clovercode.toolcalls.schemas import load_tool_specs

TINY = "tiny:context=512"


@pytest.fixture(scope="module")
def tiny_url() -> Iterator[str]:
    with serve("--model", TINY, "--max-batch", "4") as (url, _):
        yield url


def test_binds_loopback_by_default(tiny_url):
    assert tiny_url.startswith("http://127.0.0.1:") and tiny_url.endswith("/v1")


def test_openai_client_streaming_and_not_agree(tiny_url):
    c = client(tiny_url)
    [model] = c.models.list().data
    assert model.id == TINY and model.model_extra["max_model_len"] == 512
    messages = [{"role": "user", "content": "write a test"}]
    whole = c.chat.completions.create(model=model.id, messages=messages, max_tokens=24, tools=[s.openai_tool() for s in load_tool_specs()])
    chunks = list(c.chat.completions.create(model=model.id, messages=messages, max_tokens=24, stream=True,
                                            stream_options={"include_usage": True}, tools=[s.openai_tool() for s in load_tool_specs()]))
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert whole.choices[0].message.content == streamed.strip() and streamed
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason] and finishes[0] in ("stop", "length")
    assert 0 < whole.usage.completion_tokens <= 24
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (whole.usage.prompt_tokens,
                                                                                    whole.usage.completion_tokens)


def test_openai_client_errors(tiny_url):
    c = client(tiny_url)
    with pytest.raises(openai.BadRequestError) as info:
        c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "x" * 600}])
    assert info.value.code == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="clover", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="'n' only n = 1"):
        c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "x"}], n=2)


def test_endpoint_backend_against_serve_gives_the_models_own_tokens(tiny_url):
    backend = EndpointBackend.connect(EndpointOptions(tiny_url, retries=0))
    assert (backend.model, backend.context_window) == (TINY, 512)
    messages = [Message("system", "you fix bugs"), Message("user", "the mean is wrong")]
    tools = load_tool_specs()
    params = GenerationParams(max_new_tokens=30, stop=("</tool_call>",))
    events = list(backend.generate(messages, tools, params))
    direct = list(TinyBackend(parse_spec(TINY)).generate(messages, tools, GenerationParams(max_new_tokens=30)))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "".join(e.text for e in direct if isinstance(e, TextDelta)).lstrip()
    usage = [e for e in events if isinstance(e, Usage)][-1]  # the first is the estimate made before sending
    assert (usage.prompt_tokens, usage.completion_tokens) == (direct[-2].prompt_tokens, direct[-2].completion_tokens)
    assert events[-1] == direct[-1]
    with pytest.raises(ContextTooLong):
        list(backend.generate([Message("user", "y" * 700)], tools, params))


def test_endpoint_backend_names_the_models_a_server_has(tiny_url):
    with pytest.raises(ModelUnavailable, match=f"(?s)does not serve a model named 'clover'.*It serves: {TINY}"):
        EndpointBackend.connect(EndpointOptions(tiny_url, model="clover", retries=0))


def test_fix_runs_through_serve_with_an_api_key(calc_repo):
    replay = str(EXAMPLES / "calc.replay.jsonl")
    # A client-side `endpoint` in the server's environment must not turn serve into a proxy.
    with serve("--model", f"replay:{replay}", env=cli_env(CLOVERCODE_SERVE_API_KEY="k-123",
                                                          CLOVERCODE_ENDPOINT="http://127.0.0.1:9/v1")) as (url, _):
        denied = run_cli("fix", "mean() is wrong", "--repo", str(calc_repo), "--sandbox", "none", "--endpoint", url, "--json",
                         env=cli_env(CLOVERCODE_ENDPOINT_RETRIES="0"))
        assert denied.returncode == 5
        assert "rejected the API key" in json.loads(denied.stdout)["error"]
        proc = run_cli("fix", "mean() is wrong", "--repo", str(calc_repo), "--sandbox", "none", "--endpoint", url, "--json",
                       env=cli_env(CLOVERCODE_API_KEY="k-123"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "fixed" and result["changed_files"] == ["calc.py"]
    assert "sum(values) / len(values)" in (calc_repo / "calc.py").read_text()
    events = [json.loads(line) for line in open(result["trajectory"], encoding="utf-8")]
    assert events[0]["model"] == f"endpoint:{url}#replay"
    turns = [e for e in events if e["kind"] == "model_turn"]
    assert [c["name"] for t in turns for c in t["calls"]] == ["view_file", "edit_file", "run_command", "finish"]


def test_fix_against_a_server_that_is_down_exits_5_with_a_reason(calc_repo):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run_cli("fix", "x", "--repo", str(calc_repo), "--sandbox", "none", "--endpoint", f"http://127.0.0.1:{port}/v1",
                   env=cli_env(CLOVERCODE_ENDPOINT_RETRIES="1"))
    assert proc.returncode == 5
    assert "cannot reach the endpoint" in proc.stderr and "connection refused" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bad_endpoint_url_is_a_usage_error(calc_repo):
    proc = run_cli("fix", "x", "--repo", str(calc_repo), "--sandbox", "none", "--endpoint", "localhost:30000")
    assert proc.returncode == 2 and "is not an http(s) URL" in proc.stderr


def test_a_port_in_use_is_a_usage_error(tiny_url):
    port = tiny_url.rsplit(":", 1)[1].split("/")[0]
    proc = run_cli("serve", "--model", TINY, "--port", port)
    assert proc.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in proc.stderr


def test_sigterm_answers_a_waiting_request_with_503():
    with serve("--model", "tiny", "--max-batch", "1") as (url, proc):
        c = client(url)
        running = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "long"}], max_tokens=4000,
                                            stream=True)
        next(iter(running))
        outcome: list = []

        def waiting() -> None:
            try:
                outcome.append(c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "w"}], max_tokens=5))
            except openai.APIStatusError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=waiting)
        thread.start()
        health = f"{url.rsplit('/v1', 1)[0]}/health"
        assert wait_for(lambda: json.load(urllib.request.urlopen(health))["queued"] == 1)
        proc.send_signal(signal.SIGTERM)
        thread.join(20)
        assert isinstance(outcome[0], openai.APIStatusError) and outcome[0].status_code == 503
        assert "shutting down" in outcome[0].message
        assert proc.wait(20) == 0


def test_a_port_out_of_range_is_a_usage_error():
    proc = run_cli("serve", "--model", TINY, "--port", "99999")
    assert proc.returncode == 2 and "--port must be at most 65535, got 99999" in proc.stderr
    assert "internal error" not in proc.stderr
    proc = run_cli("serve", "--model", TINY, env=cli_env(CLOVERCODE_SERVE_PORT="-1"))
    assert proc.returncode == 2 and "CLOVERCODE_SERVE_PORT" in proc.stderr and "internal error" not in proc.stderr


def test_an_unknown_host_says_to_fix_the_host_not_the_port():
    proc = run_cli("serve", "--model", TINY, "--host", "no-such-host.invalid", "--port", "0")
    assert proc.returncode == 2 and "cannot listen on no-such-host.invalid:0" in proc.stderr
    assert "Give --host an address of this machine" in proc.stderr and "another port" not in proc.stderr


def test_sigterm_with_an_idle_keep_alive_connection_exits_0_and_closes_it():
    """The connection a client keeps open between requests must not keep a handler thread (holding
    the model) alive into interpreter exit, where it aborted the process with 134 (ServeHTTPServer.server_close)."""
    with serve("--model", TINY) as (url, _):
        port = int(url.split(":")[2].split("/")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        body = json.dumps({"model": TINY, "messages": [{"role": "user", "content": "write a test"}], "max_tokens": 8})
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200 and json.loads(response.read())["choices"] and not response.will_close
    # serve() sent SIGTERM and asserted exit status 0
    conn.sock.settimeout(10)
    assert conn.sock.recv(1) == b""
    conn.close()

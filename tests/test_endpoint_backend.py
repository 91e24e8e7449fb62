"""The endpoint backend against a scripted OpenAI-compatible server on 127.0.0.1."""

import json
import socket

import pytest
from openai_stub import StubServer, chunk, drop, error, sse, stall_after, status

from clovercode.ground.messages import CallRecord, Message
from clovercode.backends.base import (ContextTooLong, Finish, GenerationParams, ModelError, Notice, TextDelta,
                                     ToolCallEvent, Usage)
from clovercode.backends.endpoint import EndpointBackend, EndpointOptions
from clovercode.backends.endpoint_http import parse_base_url
from clovercode.context.tokens import estimate_tokens
from clovercode.ground.errors import ConfigError, ExitCode, ModelUnavailable
from clovercode.backends.endpoint_tools import wire_tool
from clovercode.toolcalls.schemas import load_tool_specs

PARAMS = GenerationParams(max_new_tokens=256, stop=("</tool_call>",))
MESSAGES = [Message("system", "be brief"), Message("user", "fix it")]


def backend(stub: StubServer, sleeps: list | None = None, **options) -> EndpointBackend:
    opts = EndpointOptions(stub.url, **{"model": "clover", "backoff": 0.01, "retries": 2, "tools": "native", **options})
    return EndpointBackend(opts, sleep=(sleeps.append if sleeps is not None else lambda s: None))


def run(b: EndpointBackend, messages=MESSAGES, tools=(), params=PARAMS) -> list:
    return list(b.generate(messages, list(tools), params))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_parsed_tool_calls_arrive_as_events_and_reasoning_is_marked():
    view = json.dumps({"path": "calc.py"})
    with StubServer() as stub:
        stub.script.append(sse([
            chunk({"role": "assistant", "content": ""}),
            chunk({"reasoning_content": "Read the file "}),
            chunk({"reasoning_content": "first."}),
            chunk({"content": "Looking."}),
            chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "view_file", "arguments": ""}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": view[:7]}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": view[7:]}}]}),
            chunk({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "list_files", "arguments": "{}"}}]}),
            chunk({}, "tool_calls"),
            chunk(None, usage={"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}),
        ]))
        events = run(backend(stub), tools=load_tool_specs())
    usage = [e for e in events if isinstance(e, Usage)][-1]
    assert [e for e in events if not isinstance(e, Usage)] == [
        TextDelta("Read the file ", reasoning=True), TextDelta("first.", reasoning=True), TextDelta("Looking."),
        ToolCallEvent("view_file", {"path": "calc.py"}, "call_a"), ToolCallEvent("list_files", {}, "call_b"),
        Finish("tool_calls")]
    assert (usage.prompt_tokens, usage.completion_tokens) == (120, 30)


def test_request_carries_tools_from_the_schemas_auth_and_no_tool_call_stop():
    specs = load_tool_specs()
    with StubServer() as stub:
        stub.script.append(sse([chunk({"content": "ok"}, "stop")]))
        history = [*MESSAGES, Message("assistant", "", "thinking", (CallRecord("c1", "view_file", {"path": "a.py"}),)),
                   Message("tool", "1 line", tool_call_id="c1", name="view_file")]
        run(backend(stub, api_key="sekret"), history, specs,
            GenerationParams(max_new_tokens=99, stop=("</tool_call>", "STOP"), thinking=False, seed=7))
        sent = stub.posts[0]
    body = sent["body"]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["Authorization"] == "Bearer sekret"
    assert body["tools"] == [wire_tool(s) for s in specs]  # the schemas, less the bounds llama.cpp cannot compile
    assert body["tool_choice"] == "auto"
    assert body["stop"] == ["STOP"]
    assert (body["model"], body["max_tokens"], body["seed"], body["stream"]) == ("clover", 99, 7, True)
    assert body["stream_options"] == {"include_usage": True}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["messages"][2] == {"role": "assistant", "content": "", "reasoning_content": "thinking",
                                   "tool_calls": [{"id": "c1", "type": "function",
                                                   "function": {"name": "view_file", "arguments": "{\"path\": \"a.py\"}"}}]}
    assert body["messages"][3] == {"role": "tool", "content": "1 line", "tool_call_id": "c1", "name": "view_file"}


def test_raw_text_calls_stay_text_for_the_loop_and_missing_usage_is_estimated():
    text = "<think>plan</think>\n<tool_call>\n<function=list_files>\n</function>\n</tool_call>"
    with StubServer() as stub:
        stub.script.append(sse([chunk({"content": text[:10]}), chunk({"reasoning": "r"}), chunk({"content": text[10:]}, "stop")]))
        events = run(backend(stub), tools=load_tool_specs())
    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta(text[:10]), TextDelta("r", True), TextDelta(text[10:])]
    assert not [e for e in events if isinstance(e, ToolCallEvent)]
    usage = [e for e in events if isinstance(e, Usage)][-1]
    assert usage.extra == {"usage_estimated": True} and usage.completion_tokens > 0
    assert usage.completion_tokens == estimate_tokens(text[:10] + "r" + text[10:])  # the project's one estimate
    assert events[-1] == Finish("stop")


def test_retries_5xx_and_429_with_backoff_then_succeeds():
    sleeps: list[float] = []
    with StubServer() as stub:
        stub.script += [error(503, "warming up"), status(429, {"error": {"message": "slow down"}}, {"Retry-After": "0.25"}),
                        sse([chunk({"content": "hi"}, "stop")])]
        events = run(backend(stub, sleeps, retries=3))
        assert len(stub.posts) == 3
    assert TextDelta("hi") in events
    assert len(sleeps) == 2 and 0.01 <= sleeps[0] <= 0.0125 and sleeps[1] == 0.25  # backoff, then the server's Retry-After


def test_gives_up_after_retries_with_a_clear_error():
    with StubServer() as stub:
        stub.script += [error(502, "bad gateway")] * 3
        with pytest.raises(ModelError, match=r"failed \(HTTP 502\): bad gateway \(gave up after 2 retries\)"):
            run(backend(stub))
        assert len(stub.posts) == 3


def test_dropped_connection_is_retried():
    with StubServer() as stub:
        stub.script += [drop(), sse([chunk({"content": "back"}, "stop")])]
        assert TextDelta("back") in run(backend(stub))


def test_client_errors_are_not_retried_and_say_what_is_wrong():
    with StubServer() as stub:
        stub.script.append(error(400, "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens."))
        with pytest.raises(ContextTooLong, match="no longer fits the model's context window"):
            run(backend(stub))
        stub.script.append(error(404, "The model `clover-x` does not exist.", "model_not_found"))
        with pytest.raises(ModelError, match="has no model 'clover'") as info:
            run(backend(stub))
        assert "endpoint_model" in str(info.value)
        stub.script.append(error(401, "invalid key"))
        with pytest.raises(ModelError, match="rejected the API key") as info:
            run(backend(stub))
        assert "CLOVERCODE_API_KEY" in str(info.value)
        assert len(stub.posts) == 3


def test_error_event_mid_stream_becomes_a_model_error():
    with StubServer() as stub:
        stub.script.append(sse([chunk({"content": "par"}), {"error": {"message": "CUDA out of memory", "code": 500}}]))
        events = []
        with pytest.raises(ModelError, match="CUDA out of memory"):
            for event in backend(stub).generate(MESSAGES, [], PARAMS):
                events.append(event)
    assert events[1:] == [TextDelta("par")]


def test_stall_mid_reply_times_out():
    with StubServer() as stub:
        stub.script.append(stall_after([chunk({"content": "a"})], 3.0))
        with pytest.raises(ModelError, match="sent nothing for 0.5 s mid-reply"):
            run(backend(stub, read_timeout=0.5))


def test_vllm_without_auto_tool_choice_falls_back_to_text_calls():
    with StubServer() as stub:
        stub.script += [error(400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'),
                        sse([chunk({"content": "<tool_call>"}, "stop")]), sse([chunk({"content": "again"}, "stop")])]
        b = backend(stub)
        run(b, tools=load_tool_specs())
        run(b, tools=load_tool_specs())
        assert [p["body"]["tool_choice"] for p in stub.posts] == ["auto", "none", "none"]


def test_connect_picks_the_only_model_and_reads_its_context_window():
    with StubServer(["Diffuspace/Clover-35B-A3B-Preview"], {"max_model_len": 65536}) as stub:
        b = EndpointBackend.connect(EndpointOptions(stub.url))
    assert b.model == "Diffuspace/Clover-35B-A3B-Preview"
    assert b.context_window == 65536


def test_connect_rejects_an_unknown_or_ambiguous_model():
    with StubServer(["a", "b"]) as stub:
        with pytest.raises(ModelUnavailable, match="serves several models: a, b"):
            EndpointBackend.connect(EndpointOptions(stub.url))
        with pytest.raises(ModelUnavailable, match="does not serve a model named 'c'") as info:
            EndpointBackend.connect(EndpointOptions(stub.url, model="c"))
    assert "It serves: a, b" in str(info.value)
    assert info.value.exit_code == ExitCode.MODEL_UNAVAILABLE


def test_connect_without_model_listing_needs_a_name():
    with StubServer(models=None) as stub:
        with pytest.raises(ModelUnavailable, match="does not list its models"):
            EndpointBackend.connect(EndpointOptions(stub.url))
        assert EndpointBackend.connect(EndpointOptions(stub.url, model="m")).model == "m"


def test_server_down_is_model_unavailable_after_retries():
    sleeps: list[float] = []
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ModelUnavailable, match="cannot reach the endpoint .*connection refused.*gave up after 2 retries") as info:
        EndpointBackend.connect(EndpointOptions(url, retries=2, backoff=0.01), sleep=sleeps.append)
    assert len(sleeps) == 2
    assert "Is the server running" in str(info.value)


@pytest.mark.parametrize("url, expected", [
    ("http://h:30000/v1", "http://h:30000/v1"),
    ("http://h:30000", "http://h:30000/v1"),
    ("http://h:8000/v1/chat/completions", "http://h:8000/v1"),
    ("https://gpu.example/api/v1/", "https://gpu.example:443/api/v1"),
])
def test_base_url_forms(url, expected):
    assert parse_base_url(url).url == expected


@pytest.mark.parametrize("url", ["127.0.0.1:30000", "ftp://h/v1", "http://:80", "http://h:99999/v1"])
def test_bad_base_urls_are_config_errors(url):
    with pytest.raises(ConfigError):
        parse_base_url(url)


def test_a_server_that_ignores_stream_true_still_works():
    completion = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Reading.", "reasoning_content": "need the file",
        "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "view_file", "arguments": "{\"path\": \"x.py\"}"}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 4}}
    with StubServer() as stub:
        stub.script.append(status(200, completion))
        events = run(backend(stub))
    assert events[1:] == [TextDelta("need the file", reasoning=True), TextDelta("Reading."),
                          ToolCallEvent("view_file", {"path": "x.py"}, "c9"), events[4], Finish("tool_calls")]
    assert (events[4].prompt_tokens, events[4].completion_tokens) == (10, 4)


def test_the_runs_tool_choice_goes_to_the_server_in_openais_shapes():
    with StubServer() as stub:
        stub.script += [sse([chunk({"content": "ok"}, "stop")]) for _ in range(3)]
        b = backend(stub)
        for choice in ("required", "view_file", None):
            run(b, tools=load_tool_specs(), params=GenerationParams(max_new_tokens=9, tool_choice=choice))
        assert [p["body"]["tool_choice"] for p in stub.posts] == [
            "required", {"type": "function", "function": {"name": "view_file"}}, "auto"]


def test_a_server_that_refuses_the_choice_gets_auto_and_the_run_is_told():
    with StubServer() as stub:
        stub.script += [error(400, "tool_choice 'required' is not supported by this server"),
                        sse([chunk({"content": "ok"}, "stop")]), sse([chunk({"content": "again"}, "stop")])]
        b = backend(stub)
        required = GenerationParams(max_new_tokens=9, tool_choice="required")
        first = run(b, tools=load_tool_specs(), params=required)
        second = run(b, tools=load_tool_specs(), params=required)
        assert [p["body"]["tool_choice"] for p in stub.posts] == ["required", "auto", "auto"]
        notices = [e for e in first + second if isinstance(e, Notice)]
        assert len(notices) == 1 and "refused tool_choice \"required\"" in notices[0].text


def test_tools_reach_a_server_without_the_string_bounds_llama_cpp_cannot_compile():
    spec = next(s for s in load_tool_specs(names=["list_files"]))
    sent = wire_tool(spec)["function"]["parameters"]
    text = json.dumps(sent)
    assert "^[^" not in text  # llama.cpp's grammar converter lets such a string run forever
    assert "pattern" in sent["properties"]  # a parameter named "pattern" is not a pattern
    assert "maxLength" not in text  # 1,024 nested optionals in llama.cpp's grammar: refused, then an abort
    assert sent["properties"]["path"]["type"] == "string" and "description" in sent["properties"]["path"]
    assert "^[^" in json.dumps(spec.parameters) and "maxLength" in json.dumps(spec.parameters)  # the tool's own schema (the validator's) is unchanged

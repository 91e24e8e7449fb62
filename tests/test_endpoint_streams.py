"""The endpoint backend's rules for how a reply ends, when to stream, how tools reach the model,
the context window and the usage estimate — pinned against the scripted server on 127.0.0.1."""

import json

import pytest
from openai_stub import StubServer, chunk, drop, error, sse, status

from clovercode.ground.messages import CallRecord, Message
from clovercode.backends.base import ContextTooLong, Finish, GenerationParams, ModelError, Notice, TextDelta, ToolCallEvent, Usage
from clovercode.backends.endpoint import EndpointBackend, EndpointOptions
from clovercode.context.tokens import estimate_tokens
from clovercode.toolcalls.schemas import load_tool_specs

PARAMS = GenerationParams(max_new_tokens=256, stop=("</tool_call>",))
MESSAGES = [Message("system", "be brief"), Message("user", "fix it")]
CONTEXT_400 = error(400, "Requested tokens (9000) exceed context window of 8192", "context_length_exceeded")


def backend(stub: StubServer, **options) -> EndpointBackend:
    opts = EndpointOptions(stub.url, **{"model": "clover", "backoff": 0.01, "retries": 2, "tools": "native", **options})
    return EndpointBackend(opts, sleep=lambda s: None)


def run(b: EndpointBackend, messages=MESSAGES, tools=(), params=PARAMS) -> list:
    return list(b.generate(messages, list(tools), params))


def completion(content: str = "", calls=(), usage=(30, 5), finish="stop") -> dict:
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return {"choices": [{"index": 0, "finish_reason": finish, "message": message}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]}}


def visible(events: list) -> list:
    return [e for e in events if not isinstance(e, Usage)]


# --- how a stream may end ---------------------------------------------------------------------

def test_an_empty_stream_is_asked_again_unstreamed_and_the_real_error_comes_through():
    with StubServer() as stub:
        stub.script += [sse([], done=False), CONTEXT_400]
        with pytest.raises(ContextTooLong, match="exceed context window of 8192"):
            run(backend(stub))
        assert [p["body"]["stream"] for p in stub.posts] == [True, False]


def test_an_empty_stream_whose_retry_answers_gives_that_answer():
    with StubServer() as stub:
        stub.script += [sse([chunk({"role": "assistant"})], done=False), status(200, completion("hello", usage=(20, 2)))]
        events = run(backend(stub))
    assert visible(events) == [TextDelta("hello"), Finish("stop")]
    assert (events[-2].prompt_tokens, events[-2].completion_tokens) == (20, 2)


def test_a_cut_stream_is_an_error_that_keeps_nothing_and_names_the_log():
    with StubServer() as stub:
        stub.script.append(sse([chunk({"content": "half a rep"})], done=False))
        events = []
        with pytest.raises(ModelError, match="stopped mid-reply.*without a finish_reason or \\[DONE\\]") as info:
            for event in backend(stub).generate(MESSAGES, [], PARAMS):
                events.append(event)
        assert len(stub.posts) == 1  # the server is alive: no second request for a part-reply
    assert "server's log" in str(info.value) and "dropped" in str(info.value)
    assert not any(isinstance(e, Finish) for e in events)


def test_an_empty_stream_from_a_server_that_then_vanishes_is_a_model_error():
    with StubServer() as stub:
        stub.script += [sse([], done=False), drop()]
        with pytest.raises(ModelError, match="closed its reply stream without an answer, and then stopped answering") as info:
            run(backend(stub))
    assert "server's log" in str(info.value)


@pytest.mark.parametrize("chunks, done", [
    ([chunk({"content": "ok"}, "stop")], False),  # finish_reason, no [DONE]
    ([chunk({"content": "ok"})], True),  # [DONE], no finish_reason
    ([chunk({"content": "ok"}, "stop")], True),  # both, but no usage
])
def test_a_finished_stream_without_usage_is_a_turn_with_estimated_usage(chunks, done):
    with StubServer() as stub:
        stub.script.append(sse(chunks, done=done))
        events = run(backend(stub))
        assert len(stub.posts) == 1
    assert visible(events) == [TextDelta("ok"), Finish("stop")]
    assert events[-2].extra == {"usage_estimated": True} and events[-2].completion_tokens == estimate_tokens("ok")


# --- endpoint_stream ----------------------------------------------------------------------------

def test_stream_false_sends_unstreamed_requests_and_reads_tool_calls():
    call = {"id": "call_1", "type": "function", "function": {"name": "view_file", "arguments": "{\"path\": \"a.py\"}"}}
    with StubServer() as stub:
        stub.script.append(status(200, completion("", [call], finish="tool_calls")))
        events = run(backend(stub, stream="false"), tools=load_tool_specs())
        body = stub.posts[0]["body"]
    assert body["stream"] is False and "stream_options" not in body and body["tool_choice"] == "auto"
    assert visible(events) == [ToolCallEvent("view_file", {"path": "a.py"}, "call_1"), Finish("tool_calls")]


def test_auto_stops_streaming_tools_for_a_server_that_refuses_and_says_so_once():
    refusal = {"error": {"message": "Automatic streaming tool choice is not supported", "code": 500}}
    with StubServer() as stub:
        stub.script += [sse([refusal], done=False), status(200, completion("first")),
                        status(200, completion("second")), sse([chunk({"content": "no tools"}, "stop")])]
        b = backend(stub)
        first = run(b, tools=load_tool_specs())
        second = run(b, tools=load_tool_specs())
        third = run(b)  # without tools it still streams
        assert [p["body"]["stream"] for p in stub.posts] == [True, False, False, True]
    notices = [e for e in first + second if isinstance(e, Notice)]
    assert len(notices) == 1 and not notices[0].loud and "no longer streamed" in notices[0].text
    assert TextDelta("first") in first and TextDelta("second") in second and TextDelta("no tools") in third


def test_auto_stops_streaming_tools_after_an_empty_stream_the_unstreamed_request_answers():
    with StubServer() as stub:
        stub.script += [sse([], done=False), status(200, completion("answer")), status(200, completion("again"))]
        b = backend(stub)
        first = run(b, tools=load_tool_specs())
        run(b, tools=load_tool_specs())
        assert [p["body"]["stream"] for p in stub.posts] == [True, False, False]
    assert [e.text for e in first if isinstance(e, Notice)] and TextDelta("answer") in first


def test_stream_true_keeps_streaming_after_a_refusal():
    with StubServer() as stub:
        stub.script += [sse([], done=False), status(200, completion("answer")), sse([chunk({"content": "x"}, "stop")])]
        b = backend(stub, stream="true")
        run(b, tools=load_tool_specs())
        run(b, tools=load_tool_specs())
        assert [p["body"]["stream"] for p in stub.posts] == [True, False, True]


# --- endpoint_tools -----------------------------------------------------------------------------

def test_prompt_mode_puts_the_tools_in_the_system_prompt_and_keeps_past_calls_as_text():
    history = [*MESSAGES, Message("assistant", "Reading.", tool_calls=(CallRecord("c1", "view_file", {"path": "a.py"}),)),
               Message("tool", "1: x = 1", tool_call_id="c1", name="view_file")]
    with StubServer() as stub:
        stub.script.append(sse([chunk({"content": "<tool_call>\n<function=finish>\n"}, "stop")]))
        events = run(backend(stub, tools="prompt"), history, load_tool_specs())
        body = stub.posts[0]["body"]
    assert "tools" not in body and "tool_choice" not in body
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    system, assistant, result = body["messages"][0]["content"], body["messages"][2]["content"], body["messages"][3]["content"]
    assert system.startswith("be brief") and "<name>view_file</name>" in system and "<function=FUNCTION_NAME>" in system
    assert assistant == "Reading.\n<tool_call>\n<function=view_file>\n<parameter=path>\na.py\n</parameter>\n</function>\n</tool_call>"
    assert result == "<tool_response>\n1: x = 1\n</tool_response>"
    assert events[0].prompt_tokens >= estimate_tokens(system)  # the estimate counts the tool section


def test_auto_tools_switches_to_the_prompt_when_the_template_drops_them():
    with StubServer(probe_tokens=(14, 14)) as stub:
        stub.script += [sse([chunk({"content": "a"}, "stop")]), sse([chunk({"content": "b"}, "stop")])]
        b = backend(stub, tools="auto")
        first = run(b, tools=load_tool_specs())
        run(b, tools=load_tool_specs())
        assert len(stub.probes) == 2  # asked once per session
        assert [("tools" in p) for p in stub.probes] == [False, True]
        assert all("tools" not in p["body"] for p in stub.posts)
    [notice] = [e for e in first if isinstance(e, Notice)]
    assert "leaves the tools out" in notice.text and "endpoint_tools" in notice.text


def test_auto_tools_stays_native_when_the_template_renders_them():
    with StubServer(probe_tokens=(14, 1400)) as stub:
        stub.script.append(sse([chunk({"content": "a"}, "stop")]))
        events = run(backend(stub, tools="auto"), tools=load_tool_specs())
        assert "tools" in stub.posts[0]["body"]
    assert not [e for e in events if isinstance(e, Notice)]


# --- the context window -------------------------------------------------------------------------

def test_the_window_comes_from_llama_cpp_props():
    with StubServer(routes={"/props": {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1}}) as stub:
        b = EndpointBackend.connect(EndpointOptions(stub.url))
        assert b.context_window == 8192 and not b.window_assumed


def test_the_window_comes_from_sglang_model_info():
    with StubServer(routes={"/get_model_info": {"model_path": "m", "context_length": 65536}}) as stub:
        assert EndpointBackend.connect(EndpointOptions(stub.url)).context_window == 65536


def test_an_unpublished_window_is_assumed_loudly_and_named_in_a_context_error():
    with StubServer() as stub:
        b = EndpointBackend.connect(EndpointOptions(stub.url, tools="native", retries=0))
        assert not hasattr(b, "context_window") and b.window_assumed
        stub.script.append(CONTEXT_400)
        events = []
        with pytest.raises(ContextTooLong) as info:
            for event in b.generate(MESSAGES, [], PARAMS):
                events.append(event)
        paths = [r["path"] for r in stub.requests if r["method"] == "GET"]
    assert paths == ["/v1/models", "/props", "/get_model_info", "/get_server_info"]
    [notice] = [e for e in events if isinstance(e, Notice)]
    assert notice.loud and "assumes 32768 tokens" in notice.text and "context.window" in notice.text
    assert "set context.window (CLOVERCODE_CONTEXT_WINDOW) to 8192" in str(info.value)
    assert b.context_window == 8192  # what the server said; the REPL's next task is fitted to it


def test_a_window_the_person_set_needs_no_note():
    with StubServer() as stub:
        b = EndpointBackend.connect(EndpointOptions(stub.url, tools="native", window_setting=8192))
        stub.script.append(sse([chunk({"content": "a"}, "stop")]))
        assert not [e for e in run(b) if isinstance(e, Notice)]


# --- usage --------------------------------------------------------------------------------------

def test_the_prompt_estimate_comes_first_and_counts_tools_and_call_arguments():
    big = "x = 1\n" * 400
    history = [*MESSAGES, Message("assistant", "", tool_calls=(CallRecord("c1", "write_file", {"path": "a.py", "content": big}),)),
               Message("tool", "wrote a.py", tool_call_id="c1", name="write_file")]
    with StubServer() as stub:
        stub.script += [sse([chunk({"content": "a"}, "stop")])] * 2
        b = backend(stub)
        bare = run(b, MESSAGES)[0]
        full = run(b, history, load_tool_specs())[0]
    tools_json = json.dumps([s.openai_tool() for s in load_tool_specs()])
    assert bare.extra == full.extra == {"usage_estimated": True}
    assert full.prompt_tokens - bare.prompt_tokens >= estimate_tokens(tools_json) + estimate_tokens(big)


@pytest.mark.parametrize("refusal", ["registry.ollama.ai/library/smollm2:135m does not support tools",
                                     "tools param requires --jinja flag"])
def test_auto_tools_goes_to_the_prompt_for_a_server_that_refuses_tools(refusal):
    with StubServer(probe_refusal=refusal) as stub:
        stub.script.append(sse([chunk({"content": "a"}, "stop")]))
        events = run(backend(stub, tools="auto"), tools=load_tool_specs())
        assert "tools" not in stub.posts[0]["body"]
    [notice] = [e for e in events if isinstance(e, Notice)]
    assert "refuses tools" in notice.text and "endpoint_tools = prompt" in notice.text


def test_clovercode_serve_is_not_probed():
    with StubServer(model_extra={"owned_by": "clovercode", "max_model_len": 8192}) as stub:
        b = EndpointBackend.connect(EndpointOptions(stub.url, tools="auto"))
        stub.script.append(sse([chunk({"content": "a"}, "stop")]))
        run(b, tools=load_tool_specs())
        assert not stub.probes and "tools" in stub.posts[0]["body"]


def test_stream_false_holds_for_prompt_mode_too():
    with StubServer() as stub:
        stub.script.append(status(200, completion("plain")))
        events = run(backend(stub, stream="false", tools="prompt"), tools=load_tool_specs())
        assert stub.posts[0]["body"]["stream"] is False and "tools" not in stub.posts[0]["body"]
    assert TextDelta("plain") in events


def test_a_refusal_as_an_http_400_is_retried_unstreamed_at_once():
    with StubServer() as stub:
        stub.script += [error(400, "Automatic streaming tool choice is not supported"), status(200, completion("ok"))]
        events = run(backend(stub), tools=load_tool_specs())
        assert [p["body"]["stream"] for p in stub.posts] == [True, False]
    assert TextDelta("ok") in events and any(isinstance(e, Notice) for e in events)

"""Counts that say what happened (issue 35): a reply with only reasoning is no answer; a turn cut
before it wrote anything is no step; tokens a server streamed count when it sends no usage. The
loop in-process against an OpenAI-compatible stub on 127.0.0.1."""

from __future__ import annotations

from openai_stub import StubServer, chunk, sse

from clovercode.agent.events import RecordingSink
from clovercode.backends.endpoint import EndpointBackend, EndpointOptions
from clovercode.ground.config import load_config
from clovercode.executors.select import make_executor
from clovercode.wiring.session import Session


def run(tmp_path, replies, **settings):
    with StubServer(["clover"]) as stub:
        stub.script.extend(replies)
        cfg = load_config(tmp_path, {}, {"sandbox": "none", **settings})
        backend = EndpointBackend(EndpointOptions(stub.url, model="clover", retries=0))
        sink = RecordingSink()
        result = Session(tmp_path, cfg, backend, make_executor(cfg), interactive=True).run_task("explain", sink)
    return result, sink


def test_a_reasoning_only_reply_is_not_an_answer(tmp_path):
    thinking = sse([chunk({"reasoning_content": "Let me think. "}), chunk({}, "stop")])
    result, sink = run(tmp_path, [thinking, thinking, thinking])
    # before: stop_reason answered, exit 0, answer ""
    assert result.stop.value == "format_errors" and result.summary is None
    assert len(sink.of("format_error")) == 3 and "no answer" in sink.of("format_error")[0]["text"]


def test_an_empty_reply_then_an_answer_is_answered(tmp_path):
    empty = sse([chunk({"reasoning_content": "Hm."}), chunk({}, "stop")])
    said = sse([chunk({"content": "It adds numbers."}), chunk({}, "stop")])
    result, _ = run(tmp_path, [empty, said])
    assert result.stop.value == "answered" and result.summary == "It adds numbers." and result.steps == 2


def test_streamed_tokens_count_when_the_server_sends_no_usage(tmp_path):
    words = sse([chunk({"content": "word " * 40}), chunk({}, "stop")])  # no usage chunk at all
    result, _ = run(tmp_path, [words])
    assert result.stop.value == "answered" and result.completion_tokens > 0 and result.usage_estimated


def test_a_turn_cut_before_any_text_is_no_step(tmp_path):
    from openai_stub import stall_after

    result, sink = run(tmp_path, [stall_after([], 30)], max_time=1.5)
    assert result.stop.value == "max_time" and result.steps == 0  # before: 1 step, 0/0 tokens


def test_a_turn_cut_by_the_deadline_is_on_record_with_estimated_usage(tmp_path):
    import io
    import json

    from openai_stub import stall_after

    from clovercode.ui.jsonevents import JsonEventWriter

    result, sink = run(tmp_path, [stall_after([chunk({"content": "I will read the file "})], 30)], max_time=1.5)
    assert result.stop.value == "max_time" and result.steps == 1 and result.usage_estimated
    # before: the step counted, but no model_turn (no model_text, no trajectory record) said what it wrote
    [turn] = sink.of("model_turn")
    assert turn["cut"] and turn["content"].strip() == "I will read the file" and turn["usage"]["usage_estimated"]
    out = io.StringIO()
    writer = JsonEventWriter(out)
    for kind, data in sink.events:
        writer.emit(kind, **data)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    [text] = [e for e in events if e["type"] == "model_text"]
    assert text["text"].strip() == "I will read the file" and text["usage"]["estimated"] is True
    # before: run_completed's usage dropped the marker the run's own JSON keeps
    assert [e for e in events if e["type"] == "run_completed"][0]["usage"]["estimated"] is True

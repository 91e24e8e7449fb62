"""What the loop, `fix` and the REPL make of an endpoint's broken replies and estimated usage."""

import json

from conftest import run_cli
from openai_stub import StubServer, chunk, error, sse, status

from clovercode.agent.events import RecordingSink
from clovercode.backends.endpoint import EndpointBackend, EndpointOptions
from clovercode.ground.config import load_config
from clovercode.executors.select import make_executor
from clovercode.wiring.session import Session

FINISH_AS_TEXT = "<tool_call>\n<function=finish>\n<parameter=summary>\nnothing to do\n</parameter>\n</function>\n</tool_call>"


def test_fix_with_a_reply_cut_by_the_server_exits_5_not_gave_up(calc_repo):
    with StubServer(["clover"]) as stub:
        stub.script.append(sse([chunk({"content": "I will look at calc"})], done=False))
        proc = run_cli("fix", "the mean is wrong", "--endpoint", stub.url, "--sandbox", "none", "--no-commit",
                       "-C", str(calc_repo), "--json")
        assert len(stub.posts) == 1
    assert proc.returncode == 5, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "model_error" and result["stop_reason"] == "model_error"
    assert "stopped mid-reply" in result["detail"]


def test_repl_shows_an_error_for_an_empty_stream_not_an_empty_answer(calc_repo):
    with StubServer(["clover"]) as stub:
        stub.script += [sse([], done=False), error(500, "llama_decode returned -1")]  # the unstreamed retry's answer
        proc = run_cli("--endpoint", stub.url, "--sandbox", "none", "-C", str(calc_repo),
                       input="what does calc.py do?\n/exit\n")
    out = proc.stdout + proc.stderr
    assert "the model answered" not in out
    assert "llama_decode returned -1" in out


def test_fix_json_and_summary_mark_estimated_usage(calc_repo):
    args = ("fix", "the mean is wrong", "--sandbox", "none", "--no-commit", "-C", str(calc_repo), "--test-command", "none")
    with StubServer(["clover"]) as stub:  # a server that sends no usage at all
        stub.script += [sse([chunk({"content": FINISH_AS_TEXT}, "stop")])] * 2
        proc = run_cli(*args, "--endpoint", stub.url, "--json")
        shown = run_cli(*args, "--endpoint", stub.url)
    usage = json.loads(proc.stdout)["usage"]
    assert usage["estimated"] is True and usage["prompt_tokens"] > 1000  # the tool schemas are counted
    assert "tokens ~" in shown.stdout


def test_a_repetition_cut_turn_records_its_prompt_tokens(tmp_path):
    with StubServer(["clover"]) as stub:
        stub.script.append(sse([chunk({"content": "path_" * 40}) for _ in range(20)] + [chunk({}, "stop")]))
        cfg = load_config(tmp_path, {}, {"sandbox": "none", "max_steps": 1})
        backend = EndpointBackend(EndpointOptions(stub.url, model="clover", retries=0, tools="native"))
        sink = RecordingSink()
        Session(tmp_path, cfg, backend, make_executor(cfg), interactive=False).run_task("do it", sink)
    [turn] = sink.of("model_turn")
    assert turn["usage"]["cut"] == "repetition" and turn["usage"]["usage_estimated"] is True
    assert turn["usage"]["prompt_tokens"] > 1000  # system prompt and tool schemas, estimated before streaming


def test_endpoint_stream_flag_reaches_the_requests_and_bad_values_are_refused(calc_repo):
    call = {"id": "c1", "type": "function", "function": {"name": "finish", "arguments": "{\"summary\": \"nothing\"}"}}
    answer = {"choices": [{"index": 0, "finish_reason": "tool_calls",
                           "message": {"role": "assistant", "content": "", "tool_calls": [call]}}],
              "usage": {"prompt_tokens": 3000, "completion_tokens": 9}}
    with StubServer(["clover"]) as stub:
        stub.script.append(status(200, answer))
        proc = run_cli("fix", "the mean is wrong", "--endpoint", stub.url, "--endpoint-stream", "false", "--sandbox",
                       "none", "--no-commit", "--test-command", "none", "-C", str(calc_repo), "--json")
        assert [p["body"]["stream"] for p in stub.posts] == [False]
    result = json.loads(proc.stdout)
    assert result["stop_reason"] == "finished" and result["usage"] == {"prompt_tokens": 3000, "completion_tokens": 9}
    bad = run_cli("fix", "x", "--endpoint", "http://127.0.0.1:9/v1", "--endpoint-stream", "maybe", "-C", str(calc_repo))
    assert bad.returncode == 2 and "--endpoint-stream" in bad.stderr

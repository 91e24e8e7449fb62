"""The endpoint backend against a real llama.cpp server: llama-cpp-python[server] 0.3.36 with the
SmolLM2-135M GGUF (scripts/setup.sh installs both), started on 127.0.0.1 as users start it."""

import json

import pytest
from conftest import run_cli

pytest.importorskip("llama_cpp.server", reason="llama-cpp-python[server] is not installed (scripts/setup.sh builds it)")

from llama_server import LlamaServer, prompt_tokens_logged  # noqa: E402

from clovercode.agent.budget import StopReason  # noqa: E402
from clovercode.agent.events import RecordingSink  # noqa: E402
from clovercode.ground.messages import Message  # noqa: E402
from clovercode.backends.base import Finish, GenerationParams, Notice, TextDelta, ToolCallEvent, Usage  # noqa: E402
from clovercode.backends.endpoint import EndpointBackend, EndpointOptions  # noqa: E402
from clovercode.ground.config import load_config  # noqa: E402
from clovercode.engine.chat import tool_section  # noqa: E402
from clovercode.executors.select import make_executor  # noqa: E402
from clovercode.wiring.session import Session  # noqa: E402
from clovercode.toolcalls.schemas import load_tool_specs  # noqa: E402

GREEDY = GenerationParams(max_new_tokens=24, temperature=0.0)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """The server with the GGUF's own chat template (which, like many small models', renders no tools)."""
    with LlamaServer(tmp_path_factory.mktemp("llama") / "server.log", n_ctx=4096) as server:
        yield server


def test_streams_text_and_says_what_it_had_to_assume(llama):
    backend = EndpointBackend.connect(EndpointOptions(llama.url, tools="native"))
    events = list(backend.generate([Message("user", "Say hello to Ada.")], [], GREEDY))
    texts = [e for e in events if isinstance(e, TextDelta)]
    assert len(texts) > 1 and "".join(t.text for t in texts).strip()  # streamed in pieces, not in one block
    [notice] = [e for e in events if isinstance(e, Notice)]
    assert notice.loud and "assumes 32768 tokens" in notice.text  # llama-cpp-python publishes no window
    first_usage = next(i for i, e in enumerate(events) if isinstance(e, Usage))
    assert first_usage < events.index(texts[0])  # the prompt estimate comes before the reply
    assert events[-1] in (Finish("stop"), Finish("length"))
    assert events[-2].extra == {"usage_estimated": True}  # this server streams no usage


def test_a_prompt_over_the_window_is_a_clear_error_and_exit_5(llama, calc_repo):
    issue = "the mean is wrong; the log says:\n" + "ValueError in mean() at calc.py line 3\n" * 600
    proc = run_cli("fix", issue, "--endpoint", llama.url, "--sandbox", "none", "--no-commit",
                   "--test-command", "none", "-C", str(calc_repo), "--json", timeout=600)
    assert proc.returncode == 5, proc.stderr
    result = json.loads(proc.stdout)
    assert result["stop_reason"] == "model_error" and result["steps"] == 0  # the turn the model could not take is not counted
    assert "no longer fits the model's context window" in result["detail"]
    assert "maximum context length is 4096 tokens" in result["detail"]
    assert "set context.window (CLOVERCODE_CONTEXT_WINDOW) to 4096" in result["detail"]


def test_prompt_mode_tools_reach_the_model(llama):
    """auto finds that the template drops the tools; in prompt mode the server's prompt holds them."""
    specs = load_tool_specs()
    messages = [Message("system", "You are a coding assistant."), Message("user", "List the files.")]
    native = EndpointBackend.connect(EndpointOptions(llama.url, tools="native", window_setting=4096))
    before = len(llama.log())
    list(native.generate(messages, specs, GenerationParams(max_new_tokens=2)))
    native_prompt = prompt_tokens_logged(llama.log()[before:])

    auto = EndpointBackend.connect(EndpointOptions(llama.url, tools="auto", window_setting=4096))
    before = len(llama.log())
    events = list(auto.generate(messages, specs, GenerationParams(max_new_tokens=2)))
    prompt = prompt_tokens_logged(llama.log()[before:])

    tools_size = llama.count_tokens(tool_section(specs))
    assert native_prompt < tools_size  # natively, the template dropped every schema
    assert prompt >= tools_size + native_prompt - 40  # in prompt mode, the schemas and call format were there
    assert any(isinstance(e, Notice) and "leaves the tools out" in e.text for e in events)


def test_stream_false_with_chatml_function_calling_returns_tool_calls(tmp_path):
    messages = [Message("system", "You are a coding assistant. Use the functions."),
                Message("user", "List the files in the project.")]
    tools = load_tool_specs(names=["list_files", "view_file"])
    with LlamaServer(tmp_path / "server.log", n_ctx=4096, chat_format="chatml-function-calling") as server:
        unstreamed = EndpointBackend.connect(EndpointOptions(server.url, stream="false", tools="native"))
        events = list(unstreamed.generate(messages, tools, GenerationParams(max_new_tokens=64)))
        # auto: the streamed request dies inside the server ("Automatic streaming tool choice is not
        # supported", an empty 200 stream); the unstreamed retry answers, and later turns are unstreamed
        auto = EndpointBackend.connect(EndpointOptions(server.url, stream="auto", tools="native"))
        first = list(auto.generate(messages, tools, GenerationParams(max_new_tokens=64)))
        refused = "Automatic streaming tool choice is not supported" in server.log()
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert calls and calls[0].name in ("list_files", "view_file") and isinstance(calls[0].arguments, dict)
    assert events[-1] == Finish("tool_calls")
    assert not events[-2].extra  # unstreamed, the server counted the tokens itself
    assert refused  # the server really refused the streamed request
    assert [(e.name, e.arguments) for e in first if isinstance(e, ToolCallEvent)] == [(c.name, c.arguments) for c in calls]
    assert any(isinstance(e, Notice) and "no longer streamed" in e.text for e in first)
    assert auto._stream_tools is False


def test_a_server_killed_mid_reply_is_a_model_error_and_nothing_is_kept(tmp_path):
    with LlamaServer(tmp_path / "server.log", n_ctx=2048) as server:
        class KillOnFirstText(RecordingSink):
            def emit(self, kind, **data):
                super().emit(kind, **data)
                if kind == "text_delta" and server.proc.poll() is None:
                    server.kill()

        cfg = load_config(tmp_path, {}, {"sandbox": "none", "max_new_tokens": 400, "context.map_tokens": 0,
                                         "endpoint_tools": "native"})
        backend = EndpointBackend.connect(EndpointOptions(server.url, tools="native", retries=1, backoff=0.01,
                                                          window_setting=2048))
        session = Session(tmp_path, cfg, backend, make_executor(cfg), interactive=True)
        sink = KillOnFirstText()
        result = session.run_task("Write a long story about a lighthouse keeper.", sink)
    assert result.stop is StopReason.MODEL_ERROR
    assert "mid-reply" in result.detail and "server's log" in result.detail
    assert not sink.of("model_turn")
    assert [m.role for m in session.conversation.messages if m.role == "assistant"] == []

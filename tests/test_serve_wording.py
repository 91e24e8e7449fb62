"""What `clovercode serve` says in the words and shapes OpenAI clients match: context overflow,
stop sequences cut from the text (streamed and not)."""

from __future__ import annotations

import openai
import pytest
from serve_helpers import EchoBackend, running_server

from clovercode.serve.reply import StopTrimmer


@pytest.fixture(scope="module")
def app():
    with running_server(EchoBackend()) as app:
        yield app


def client(app) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{app.port}/v1", api_key="none", max_retries=0, timeout=20)


@pytest.mark.parametrize("stream", [False, True])
def test_context_overflow_says_what_openai_and_vllm_say(app, stream):
    """litellm raises ContextWindowExceededError when the message holds "This model's maximum context
    length is" (litellm/litellm_core_utils/exception_mapping_utils.py); aider then shows its help."""
    with pytest.raises(openai.BadRequestError) as info:
        result = client(app).chat.completions.create(model="test-model", messages=[{"role": "user", "content": "HUGE"}],
                                                     max_tokens=100, stream=stream)
        list(result) if stream else None
    error = info.value.body
    assert error["code"] == "context_length_exceeded" and error["type"] == "invalid_request_error"
    assert error["param"] == "messages"
    assert error["message"].startswith(
        "This model's maximum context length is 4096 tokens. However, you requested 10099 tokens (9999 in the "
        "messages, 100 in the completion). Please reduce the length of the messages or completion.")


def test_an_error_is_openais_error_object(app):
    with pytest.raises(openai.BadRequestError) as info:
        client(app).chat.completions.create(model="test-model", messages=[{"role": "user", "content": "x"}], n=3)
    assert set(info.value.body) == {"message", "type", "param", "code"} and info.value.body["param"] == "n"


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequences_are_cut_from_the_text(app, stream):
    messages = [{"role": "user", "content": "red, blue, green"}]
    result = client(app).chat.completions.create(model="test-model", messages=messages, stop=["green", "blue"],
                                                 stream=stream)
    if stream:
        chunks = [c for c in result if c.choices]
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        finish = chunks[-1].choices[0].finish_reason
    else:
        text, finish = result.choices[0].message.content, result.choices[0].finish_reason
    assert (text.rstrip(), finish) == ("echo: red,", "stop")  # a whole reply is stripped, as before


def test_text_that_may_begin_a_stop_sequence_is_held_back_until_it_cannot():
    trimmer = StopTrimmer(("</done>",))
    assert [trimmer.feed(part) for part in ("abc</", "do", "g and </d", "one> tail")] == ["abc", "", "</dog and ", ""]
    assert trimmer.stopped and trimmer.finish() == ""
    trimmer = StopTrimmer(("xyz",))
    assert (trimmer.feed("ax"), trimmer.finish()) == ("a", "x")  # the end of the reply releases it


def test_litellm_classifies_the_overflow_as_a_context_window_error(app):
    """litellm's own exception mapping, where litellm is installed (it is no dependency of the test
    extra: 356 MB with its own; litellm 1.110.2 raised ContextWindowExceededError here)."""
    litellm = pytest.importorskip("litellm")
    with pytest.raises(litellm.ContextWindowExceededError):
        litellm.completion(model="openai/test-model", api_base=f"http://127.0.0.1:{app.port}/v1", api_key="x",
                           messages=[{"role": "user", "content": "HUGE"}], max_tokens=100, num_retries=0)

"""The tiny batching model: batched decoding equals solo decoding; stops, limits and overflow."""

import pytest

from clovercode.ground.messages import Message
from clovercode.backends.base import ContextTooLong, Finish, GenerationParams, TextDelta, Usage
from clovercode.backends.tiny import TinyBackend, TinyConfig, parse_spec
from clovercode.ground.errors import UsageError


@pytest.fixture(scope="module")
def tiny() -> TinyBackend:
    return TinyBackend(TinyConfig(context=256))


def prompt(i: int) -> list[Message]:
    return [Message("system", "sys"), Message("user", f"request {i}: " + "abc" * i)]


def solo(backend: TinyBackend, messages, params: GenerationParams) -> tuple[str, list]:
    events = list(backend.generate(messages, [], params))
    return "".join(e.text for e in events if isinstance(e, TextDelta)), events


def test_batched_tokens_equal_solo_tokens(tiny):
    params = GenerationParams(max_new_tokens=40)
    expected = [solo(tiny, prompt(i), params)[0] for i in range(5)]
    session = tiny.open_batch(3)
    texts = {str(i): "" for i in range(5)}
    waiting, active, finished = list(range(5)), 0, 0
    while finished < 5:
        while waiting and active < 3:  # join between steps, like the scheduler does
            i = waiting.pop(0)
            session.add(str(i), prompt(i), [], params)
            active += 1
        for key, event in session.step():
            if isinstance(event, TextDelta):
                texts[key] += event.text
            elif isinstance(event, Finish):
                finished, active = finished + 1, active - 1
    assert [texts[str(i)] for i in range(5)] == expected
    assert len(set(expected)) == 5  # different prompts, different replies: a mix-up would show


def test_max_tokens_ends_with_length_and_usage(tiny):
    text, events = solo(tiny, prompt(1), GenerationParams(max_new_tokens=12))
    usage = next(e for e in events if isinstance(e, Usage))
    assert events[-1] == Finish("length") and len(text) == 12
    assert usage.completion_tokens == 12 and usage.prompt_tokens > 0 and usage.forwards == 12


def test_a_stop_string_ends_the_reply_and_is_never_sent(tiny):
    full, _ = solo(tiny, prompt(2), GenerationParams(max_new_tokens=60))
    stop = full[20:23]
    text, events = solo(tiny, prompt(2), GenerationParams(max_new_tokens=60, stop=(stop,)))
    assert text == full[:full.find(stop)]
    assert events[-1] == Finish("stop")
    assert all(stop not in e.text for e in events if isinstance(e, TextDelta))


def test_a_prompt_beyond_the_window_is_context_too_long(tiny):
    with pytest.raises(ContextTooLong, match="context window is 256 tokens"):
        solo(tiny, [Message("user", "x" * 300)], GenerationParams())


def test_sampling_is_reproducible_with_a_seed(tiny):
    params = GenerationParams(max_new_tokens=30, temperature=1.0, top_p=0.9, seed=3)
    assert solo(tiny, prompt(1), params)[0] == solo(tiny, prompt(1), params)[0]


def test_removing_a_request_frees_its_slot(tiny):
    session = tiny.open_batch(1)
    session.add("a", prompt(1), [], GenerationParams())
    session.remove("a")
    session.add("b", prompt(2), [], GenerationParams(max_new_tokens=2))
    assert [k for k, _ in session.step()] == ["b"]


@pytest.mark.parametrize("spec, expected", [
    ("tiny", TinyConfig()),
    ("tiny:dim=32,layers=1,heads=2,context=64,seed=5", TinyConfig(32, 1, 2, 64, 5)),
])
def test_spec(spec, expected):
    assert parse_spec(spec) == expected


@pytest.mark.parametrize("spec, words", [
    ("tiny:width=3", "unknown option 'width'"),
    ("tiny:dim=big", "'dim' must be a whole number"),
    ("tiny:dim=30,heads=4", "invalid sizes"),
])
def test_bad_specs_are_usage_errors(spec, words):
    with pytest.raises(UsageError, match=words):
        parse_spec(spec)

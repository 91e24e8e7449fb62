"""The embedded backend through the harness seam: streaming per committed block, usage, stops."""

import pytest

from clovercode.ground.messages import Message
from clovercode.backends.base import Finish, GenerationParams, TextDelta, Usage
from clovercode.backends.registry import open_backend
from clovercode.ground.config import load_config
from clovercode.toolcalls.parser import parse_turn


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    cfg = load_config(root, {"HOME": str(root)}, {"model": "clover-tiny"})
    backend = open_backend(cfg, base_dir=root)
    yield backend
    backend.close()


def events_of(backend, request, **params):
    params = GenerationParams(**{"max_new_tokens": 96, "thinking": False, "stop": ("</tool_call>",), **params})
    return list(backend.generate([Message("user", request)], [], params))


def test_streams_blocks_then_usage_then_finish(backend):
    events = events_of(backend, "Show me json/decoder.py.")
    deltas = [e for e in events if isinstance(e, TextDelta)]
    early, usage = [e for e in events if isinstance(e, Usage)]
    assert events[0] == early and early.completion_tokens == 0 and early.prompt_tokens == usage.prompt_tokens
    assert isinstance(events[-2], Usage)
    assert isinstance(events[-1], Finish) and events[-1].reason == "stop_string"
    text = "".join(d.text for d in deltas)
    assert text.startswith("<tool_call>") and text.endswith("</tool_call>")
    assert parse_turn(text).calls[0].name == "view_file"
    assert usage.extra["block_size"] == 16
    assert usage.forwards >= len(deltas) - 1  # every committed block took at least its commit pass
    assert usage.extra["tokens_per_forward"] > 1.0
    assert usage.prompt_tokens == backend.count_tokens(
        "<|im_start|>user\nShow me json/decoder.py.<|im_end|>\n<|im_start|>assistant\n")


def test_without_a_stop_string_it_stops_at_eos_or_the_limit(backend):
    events = events_of(backend, "List the files in email.", stop=(), max_new_tokens=5)
    assert events[-1].reason == "length"
    usage = events[-2]
    assert usage.completion_tokens == 5


def test_extras_for_the_context_package(backend):
    assert backend.context_window == 4096
    assert backend.count_tokens("hello world") > 0
    assert backend.name == "embedded:clover-tiny"


def test_sampling_is_reproducible_with_a_seed(backend):
    def text(seed):
        events = events_of(backend, "Search email for parser.", temperature=0.9, top_p=0.9, seed=seed)
        return "".join(e.text for e in events if isinstance(e, TextDelta))

    assert text(11) == text(11)


def test_an_unseeded_sampled_turn_leaves_torchs_global_seed_alone(backend):
    import torch

    torch.manual_seed(1234)
    events_of(backend, "Search email for parser.", temperature=0.9, max_new_tokens=8)
    assert torch.initial_seed() == 1234

"""`clovercode serve` with the embedded engine keeps conversations' prompts: a conversation's next turn,
even after another conversation's turn, is prefilled from where its last prompt ended, the reply is
what a server without that prompt gives, and the usage says how many prompt tokens came from the
cache (OpenAI's `prompt_tokens_details.cached_tokens`). Real `clovercode serve` subprocesses on
127.0.0.1 with clover-tiny, one request at a time and batching."""

from __future__ import annotations

import pytest
from conftest import cli_env
from serve_helpers import client, serve

SYSTEM = {"role": "system", "content": "You fix failing CI jobs."}


def _ask(c, messages):
    reply = c.chat.completions.create(model="clover-tiny", messages=messages, max_tokens=24, temperature=0)
    return reply.choices[0].message.content or "", reply.usage


def _next_turn(messages, answer, text):
    return messages + [{"role": "assistant", "content": answer}, {"role": "user", "content": text}]


@pytest.mark.parametrize("max_batch", ["1", "4"], ids=["one-at-a-time", "batched"])
def test_a_conversations_next_turn_reuses_its_prompt_after_another_conversation(max_batch):
    first = [SYSTEM, {"role": "user", "content": "test_parse fails in parser.py line 12"}]
    other = [SYSTEM, {"role": "user", "content": "the lint job fails on utils.py"}]
    with serve("--model", "clover-tiny", "--max-batch", max_batch) as (url, _):
        c = client(url)
        answer, usage = _ask(c, first)
        assert usage.prompt_tokens_details.cached_tokens == 0
        opened = usage.prompt_tokens
        _ask(c, other)  # another bot's turn between the two
        following = _next_turn(first, answer, "now run the tests")
        reused, usage = _ask(c, following)
        assert usage.prompt_tokens_details.cached_tokens == opened < usage.prompt_tokens
    env = cli_env()
    env["CLOVERCODE_ENGINE_PROMPT_CACHE_TOKENS"] = "0"  # only the last prompt is kept
    with serve("--model", "clover-tiny", "--max-batch", max_batch, env=env) as (url, _):
        c = client(url)
        _ask(c, first)
        _ask(c, other)  # evicts the first conversation's prompt
        fresh, usage = _ask(c, following)
        assert usage.prompt_tokens_details.cached_tokens == 0
    assert reused == fresh  # greedy: the reused prompt gives what a full prefill gives

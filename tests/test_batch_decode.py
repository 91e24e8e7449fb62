"""Batched block-diffusion decoding (engine/batchdecode.py) against ``decode_stream`` alone, the spec:
several requests with different prompts, strategies, token limits and stop strings, joining at
different steps, one removed mid-way, decoded together on tiny Llama, Qwen3 and hybrid Qwen3.5-MoE
models and on clover-tiny; each must come out exactly as it does alone (tokens, text, streamed text,
finish reason, passes and commits). The batch denoiser is the engine's own pick (the fast one when
present), so these tests judge it too."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch
from rich.console import Console
from tinymodels import EOS_ID, MASK_ID, tiny_hybrid, tiny_llama, tiny_qwen3

from clovercode.engine.batchdecode import BatchDecoder, Request, select_rows
from clovercode.engine.chat import render_prompt
from clovercode.engine.config import EngineConfig
from clovercode.engine.decoder import DecodePlan, DecodeResult, decode_stream
from clovercode.engine.denoiser import CachedDenoiser
from clovercode.engine.engine import Engine
from clovercode.engine.sampler import select
from clovercode.engine.batchdenoiser import SlotBatchDenoiser
from clovercode.engine.serialbatch import SerialBatchDenoiser
from clovercode.engine.stops import Stops
from clovercode.ground.messages import Message


def char_detok(ids):
    return "".join(chr(40 + i) for i in ids)


@pytest.fixture(scope="module")
def clover_tiny():
    return Engine.open("clover-tiny", EngineConfig(), Console(file=open("/dev/null", "w")))


class Subject:
    """A model with what decoding it needs: a detokenizer, a plan, stops, prompts."""

    def __init__(self, model, detok, plan, eos, prompts, engine=None):
        self.model, self.detok, self.plan, self.eos, self.prompts, self.engine = model, detok, plan, eos, prompts, engine

    def batch_denoiser(self, capacity, kind="engine"):
        if kind == "serial":
            return SerialBatchDenoiser(self.model, capacity)
        if kind == "slot":
            return SlotBatchDenoiser(self.model, capacity)
        return self.engine.batch_denoiser(capacity)


def tiny_subject(build):
    rng = random.Random(3)
    prompts = [[1] + [rng.randrange(4, 90) for _ in range(n)] for n in (5, 9, 3, 14, 7, 11)]
    return Subject(build(), char_detok, DecodePlan(block_size=4, mask_id=MASK_ID, max_new_tokens=32), EOS_ID, prompts)


def clover_subject(engine):
    requests = ["Show me lines 10 to 30 of src/app.py", "Run the tests in tests/test_api.py",
                "Find where parse_config is defined", "List the files in docs/",
                "Replace 'foo' with 'bar' in util.py", "Finish: the bug is fixed"]
    prompts = [engine.encode(render_prompt(engine.tokenizer, [Message("user", r)], (), False)) for r in requests]
    return Subject(engine.model, engine.detokenize, engine.plan(max_new_tokens=80), None, prompts, engine)


SUBJECTS = {"llama": lambda request: tiny_subject(tiny_llama), "qwen3": lambda request: tiny_subject(tiny_qwen3),
            "hybrid": lambda request: tiny_subject(tiny_hybrid),
            "clover-tiny": lambda request: clover_subject(request.getfixturevalue("clover_tiny"))}


def solo(subject, prompt, plan, stops, seed=None):
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    items = list(decode_stream(CachedDenoiser(subject.model), prompt, plan, subject.detok, stops, generator=generator))
    return items[-1], "".join(items[:-1])


def together(subject, jobs, capacity, removals=None, kind="slot"):
    """Run ``jobs`` (key → (join step, prompt, plan, stops, seed)) through one BatchDecoder over the
    ``kind`` of batch denoiser; remove ``removals`` (key → step) before that step.
    → key → (result, streamed text), and the number of requests in each step."""
    decoder = BatchDecoder(subject.batch_denoiser(capacity, kind), subject.detok)
    removals = removals or {}
    streamed = {key: [] for key in jobs}
    results, widths, step = {}, [], 0
    while step == 0 or decoder.active or any(join >= step for join, *_ in jobs.values()):
        # the requests that join at one step are admitted together (one prefill forward where it can)
        joining = [Request(key, prompt, plan, stops, torch.Generator().manual_seed(seed) if seed is not None else None)
                   for key, (join, prompt, plan, stops, seed) in jobs.items() if join == step]
        if len(joining) == 1:
            decoder.add(*astuple_shallow(joining[0]))
        elif joining:
            decoder.add_many(joining)
        for key, when in removals.items():
            if when == step:
                decoder.remove(key)
        widths.append(len(decoder))
        for key, item in decoder.step():
            if isinstance(item, DecodeResult):
                assert key not in results, f"{key} finished twice"
                results[key] = item
            else:
                streamed[key].append(item)
        step += 1
        assert step < 2000
    return {key: (results[key], "".join(streamed[key])) for key in results}, widths


def astuple_shallow(request):
    return request.key, request.prompt, request.plan, request.stops, request.generator


def assert_same(alone, batched, key):
    (a, a_text), (b, b_text) = alone, batched
    assert b.tokens == a.tokens, key
    assert (b.text, b.finish, b_text) == (a.text, a.finish, a_text), key
    assert (b.stats.denoise_passes, b.stats.commits, b.stats.blocks, b.stats.new_tokens) == \
        (a.stats.denoise_passes, a.stats.commits, a.stats.blocks, a.stats.new_tokens), key


# The slot denoiser on every model; the serial reference (the batch-1 calls) where it is quick.
CASES = [(name, "slot") for name in SUBJECTS] + [("llama", "serial"), ("qwen3", "serial")]


@pytest.mark.parametrize("name,kind", CASES)
def test_greedy_requests_decoded_together_equal_each_decoded_alone(name, kind, request):
    if name != "llama":
        request.applymarker(pytest.mark.slow)
    subject = SUBJECTS[name](request)
    plan, stops = subject.plan, Stops(frozenset({subject.eos}) if subject.eos is not None else frozenset())
    # A stop string from the middle of one request's free output, so that stop really cuts it.
    p = list(subject.prompts)
    for i, prompt in enumerate(p):
        free, _ = solo(subject, prompt, replace(plan, strategy="topk", top_k=2), stops)
        if len(free.text.strip()) >= 6:
            p[1], p[i] = p[i], p[1]
            break
    stop = free.text.strip()[len(free.text.strip()) // 2:][:2]
    jobs = {"threshold": (0, p[0], plan, stops, None),
            "topk-stop": (0, p[1], replace(plan, strategy="topk", top_k=2), replace(stops, strings=(stop,)), None),
            "steps-late": (3, p[2], replace(plan, strategy="steps", steps=3, max_new_tokens=33), stops, None),
            "short": (5, p[3], replace(plan, threshold=0.7, max_new_tokens=9), stops, None),
            "removed": (0, p[4], plan, stops, None),
            "after-removal": (6, p[5], replace(plan, threshold=0.5, max_new_tokens=23), stops, None)}
    batched, widths = together(subject, jobs, capacity=5, removals={"removed": 4}, kind=kind)
    assert set(batched) == set(jobs) - {"removed"}
    assert max(widths) >= 4, widths
    assert batched["topk-stop"][0].finish == "stop_string"
    for key, (_, prompt, job_plan, job_stops, _) in jobs.items():
        if key != "removed":
            assert_same(solo(subject, prompt, job_plan, job_stops), batched[key], key)


@pytest.mark.slow
def test_the_engine_batches_clover_tiny_with_the_slot_denoiser(clover_tiny):
    assert isinstance(clover_tiny.batch_denoiser(2), SlotBatchDenoiser)


def test_sampled_requests_draw_what_they_draw_alone_and_reproduce():
    subject = tiny_subject(tiny_qwen3)
    stops = Stops(frozenset({EOS_ID}))
    warm = replace(subject.plan, temperature=0.8, top_p=0.9)
    jobs = {"sampled-a": (0, subject.prompts[0], warm, stops, 11), "greedy": (0, subject.prompts[1], subject.plan, stops, None),
            "sampled-b": (2, subject.prompts[2], replace(warm, strategy="topk"), stops, 12)}
    first, _ = together(subject, jobs, capacity=3)
    second, _ = together(subject, jobs, capacity=3)
    for key, (_, prompt, plan, job_stops, seed) in jobs.items():
        assert first[key][0].tokens == second[key][0].tokens, key
        assert_same(solo(subject, prompt, plan, job_stops, seed), first[key], key)
    assert first["sampled-a"][0].tokens != solo(subject, subject.prompts[0], warm, stops, 99)[0].tokens


def test_reading_the_unshifted_outputs_breaks_the_agreement(monkeypatch):
    # with the logit shift a masked position is predicted by the output before it: a decoder that
    # kept the masked positions' own outputs would read zeros for them
    from clovercode.engine import batchdecode

    subject = tiny_subject(tiny_qwen3)
    stops = Stops(frozenset({EOS_ID}))
    jobs = {f"r{i}": (0, subject.prompts[i], subject.plan, stops, None) for i in range(3)}
    right, _ = together(subject, jobs, capacity=3)
    monkeypatch.setattr(batchdecode, "_read", lambda seq: None if not seq.commit and seq.plan.temperature > 0
                        else seq.masked.clone() if not seq.commit else torch.arange(len(seq.masked)) == len(seq.masked) - 1)
    wrong, _ = together(subject, jobs, capacity=3)
    assert any(wrong[k][0].tokens != right[k][0].tokens for k in jobs)
    for key, (_, prompt, plan, job_stops, _) in jobs.items():
        assert_same(solo(subject, prompt, plan, job_stops), right[key], key)


def test_a_request_that_ends_at_admission_comes_out_of_the_next_step():
    subject = tiny_subject(tiny_llama)
    jobs = {"one-token": (0, subject.prompts[0], replace(subject.plan, max_new_tokens=1), Stops(), None)}
    batched, widths = together(subject, jobs, capacity=2)
    assert batched["one-token"][0].finish == "length" and len(batched["one-token"][0].tokens) == 1
    assert widths == [0]  # no forward was needed
    assert_same(solo(subject, *jobs["one-token"][1:4]), batched["one-token"], "one-token")


def test_a_block_size_other_than_the_batchs_is_refused():
    subject = tiny_subject(tiny_llama)
    decoder = BatchDecoder(SlotBatchDenoiser(subject.model, 2), char_detok)
    decoder.add("a", subject.prompts[0], subject.plan, Stops())
    with pytest.raises(ValueError, match="block size 8 differs"):
        decoder.add("b", subject.prompts[1], replace(subject.plan, block_size=8), Stops())


def test_select_rows_is_select_row_by_row():
    rng = torch.Generator().manual_seed(0)
    plans = [DecodePlan(8, 0, strategy="threshold", threshold=0.6), DecodePlan(8, 0, strategy="topk", top_k=3),
             DecodePlan(8, 0, strategy="steps", steps=4), DecodePlan(8, 0, strategy="threshold", threshold=0.95)]
    for trial in range(200):
        # every third trial all rows take a threshold (select_rows' path without a sort)
        rows = [random.Random(trial).choice(plans[::3] if trial % 3 == 0 else plans) for _ in range(5)]
        confidence = torch.rand(5, 8, generator=rng).round(decimals=1)  # ties happen: the leftmost must win
        masked = torch.rand(5, 8, generator=rng) < 0.7
        passes = [trial % 5] * 5
        chosen = select_rows(confidence, masked, rows, passes)
        for i, plan in enumerate(rows):
            expected = select(confidence[i], masked[i], plan.strategy, threshold=plan.threshold, top_k=plan.top_k,
                              passes_left=plan.steps - passes[i])
            assert torch.equal(chosen[i], expected), (trial, i, plan.strategy)


def test_a_model_the_slot_cache_cannot_take_is_batched_by_the_serial_reference():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, use_sliding_window=True,
                         sliding_window=8, max_window_layers=0, attn_implementation="sdpa")
    engine = Engine(Qwen3ForCausalLM(config).eval(), None, None, EngineConfig())  # type: ignore[arg-type]
    assert isinstance(engine.batch_denoiser(2), SerialBatchDenoiser)
    assert isinstance(Engine(tiny_llama(), None, None, EngineConfig()).batch_denoiser(2), SlotBatchDenoiser)  # type: ignore[arg-type]


@pytest.mark.parametrize("stop_strings", [("</tool_call>",), ("\n\n", "é!"), ("ab", "zz")])
def test_the_incremental_stop_check_finds_what_find_stop_finds(stop_strings):
    """Grown by random chunks (as blocks grow), the StopScanner the batch decoder uses reports the first cut find_stop reports,
    on clover-tiny's byte-level BPE with multi-byte characters and stop strings that straddle tokens."""
    from transformers import AutoTokenizer

    from clovercode.engine.sources import tiny_model_dir
    from clovercode.engine.stops import StopScanner, find_stop

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    detok = lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False)  # noqa: E731
    pieces = ["def f(x):\n", "    return x\n\n", "<tool_call>\n<function=view_file>\n", "café é!", " ab", "c zz",
              "</tool_call>", "naïve 😀 text", "\n", "b"]
    rng = random.Random(1)
    for trial in range(60):
        text = "".join(rng.choice(pieces) for _ in range(12))
        tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
        stops = Stops(frozenset({2}), stop_strings)
        watch, end, got = StopScanner(detok, stops, 10_000), 0, None
        while end < len(tokens) and got is None:
            end = min(len(tokens), end + rng.randint(1, 6))
            got = watch.extend(tokens[len(watch.tokens):end])
            expected = find_stop(tokens[:end], detok, stops, 10_000)
            assert got == expected, (trial, text, end)

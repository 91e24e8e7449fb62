"""Incremental stop checks (StopScanner, and the decode loop that uses it) against the full rule they
replace: ``find_stop`` over every final token, re-detokenizing the whole output at each check.

The property test feeds clover-tiny's real byte-level tokenizer (characters split over several
tokens, special tokens, multi-token stop strings) in random chunks, as a block's leading run grows,
and requires the same first Cut, at the same check, as running the full rule after every chunk."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from clovercode.engine.decoder import decode  # noqa: E402
from clovercode.engine.stops import WINDOW, StopScanner, Stops, find_stop  # noqa: E402
from test_engine_decoder import EOS, Scripted, detok, ids_of, plan  # noqa: E402

PIECES = ["hello", " wörld", " → ", "✓", "日本語", "END", "\n\n", "})", "<tool_call>", "</tool_call>", "E", "N",
          "D", "}", ")", "\n", " ", "x = 1", "é"]
STOP_SETS = [(), ("END",), ("\n\n", "})"), ("</tool_call>",), ("→ ✓",), ("ND\n",), ("日本",)]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from clovercode.engine.sources import tiny_model_dir

    return AutoTokenizer.from_pretrained(str(tiny_model_dir()))


def full_rule(chunks, detok_fn, stops, max_tokens):
    """The old loop's rule: after each chunk, find_stop over everything final so far."""
    final = []
    for index, chunk in enumerate(chunks):
        final += chunk
        cut = find_stop(final, detok_fn, stops, max_tokens)
        if cut is not None:
            return index, cut
    return None, None


def scanned(chunks, detok_fn, stops, max_tokens):
    scanner = StopScanner(detok_fn, stops, max_tokens)
    for index, chunk in enumerate(chunks):
        cut = scanner.extend(chunk)
        if cut is not None:
            return index, cut, scanner
    return None, None, scanner


@pytest.mark.parametrize("seed", range(60))
def test_scanner_finds_the_stop_the_full_rule_finds_at_the_same_check(tokenizer, seed):
    rng = random.Random(seed)
    text = "".join(rng.choice(PIECES) for _ in range(rng.randrange(5, 60)))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if rng.random() < 0.3:
        ids.insert(rng.randrange(len(ids) + 1), eos)
    chunks, at = [], 0
    while at < len(ids):
        size = rng.choice([1, 1, 2, 3, 5, 8, 16])
        chunks.append(ids[at:at + size])
        at += size
    stops = Stops(frozenset({eos}), rng.choice(STOP_SETS), keep_string=rng.random() < 0.7)
    max_tokens = rng.choice([None, None, rng.randrange(1, len(ids) + 2)])

    def detok_fn(tokens):
        return tokenizer.decode(list(tokens), skip_special_tokens=False)

    expected_at, expected = full_rule(chunks, detok_fn, stops, max_tokens)
    found_at, found, scanner = scanned(chunks, detok_fn, stops, max_tokens)
    assert (found_at, found) == (expected_at, expected)
    if found is None:  # streaming text: everything read, split characters held back
        assert detok_fn(scanner.tokens).startswith(scanner.text)
        assert scanner.text == detok_fn(scanner.tokens).rstrip("\ufffd")


def test_each_check_detokenizes_a_bounded_window():
    """At 4,000 tokens a check reads a few tokens, not the output: only the one final cut reads it all."""
    seen = []

    def counting(tokens):
        seen.append(len(tokens))
        return detok(tokens)

    text = "abcdefghij klmnopqrst " * 200
    scanner = StopScanner(counting, Stops(frozenset({EOS}), ("stop</",)), max_tokens=None)
    for at in range(0, len(text), 3):
        assert scanner.extend(ids_of(text[at:at + 3])) is None
    assert max(seen) <= WINDOW + 2 * 3  # context (a read or two) and the new tokens
    assert scanner.text == text
    cut = scanner.extend(ids_of("xstop</y"))
    assert cut is not None and cut.text == text + "xstop</" and cut.reason == "stop_string"
    assert max(seen) > len(text)  # the exact cut came from the full rule


def _expected(target, stops, max_tokens):
    return find_stop(target, detok, stops, max_tokens)


@pytest.mark.parametrize("text, strings, cut_text, reason", [
    ("abcdef</tool>zzzzzzzzzzzzzzzzzz", ("</tool>",), "abcdef</tool>", "stop_string"),  # split over blocks 0 and 1
    ("abcdefg</tool>zzzzzzzzzzzzzzzzz", ("</tool>",), "abcdefg</tool>", "stop_string"),  # starts at a block's end
    ("abc<x>de</tool>zzzzzzzzzzzzzzzzz", ("</tool>", "<x>"), "abc<x>", "stop_string"),  # the earliest of two
    ("abcdefghijklmno</tool>zzzzzzzzzz", ("</tool>",), "abcdefghijklmno</tool>", "stop_string"),
])
def test_stop_strings_across_blocks_end_where_the_full_rule_does(text, strings, cut_text, reason):
    stops = Stops(frozenset({EOS}), strings)
    target = ids_of(text)
    for confidence in (lambda b, s, p: 0.99, lambda b, s, p: 0.2, lambda b, s, p: 0.95 if p % 3 else 0.4):
        denoiser = Scripted(target, confidence)
        deltas = []
        result = decode(denoiser, [1, 2, 3], plan(max_new_tokens=64), detok, stops, on_text=deltas.append)
        assert (result.tokens, result.text, result.finish) == (_expected(target, stops, 64).tokens, cut_text, reason)
        assert "".join(deltas) == result.text


def test_eos_mid_block_and_the_token_limit_mid_block_end_like_the_full_rule():
    target = ids_of("abcdefghijk") + [EOS] + ids_of("zzzzzzzzzzzz")
    stops = Stops(frozenset({EOS}), ("</tool>",))
    result = decode(Scripted(target, lambda b, s, p: 0.95 if p % 2 else 0.3), [1], plan(), detok, stops)
    expected = _expected(target, stops, 64)
    assert (result.tokens, result.text, result.finish) == (expected.tokens, expected.text, "stop")
    limited = decode(Scripted(ids_of("abcdefghijklmnopqrstuvwxyz"), lambda b, s, p: 0.3), [1],
                     plan(max_new_tokens=13), detok, stops)
    assert (limited.tokens, limited.finish) == (ids_of("abcdefghijklm"), "length")
    assert limited.stats.blocks == 2  # the limit fell inside the second block, which was never committed
    assert limited.stats.commits == 1


def test_a_stop_ends_the_block_without_another_pass():
    """One position a pass: the stop string is final after the pass that accepts its last position."""
    target = ids_of("ab</t>") + ids_of("zzzzzzzzzzzzzzzzzzzz")
    denoiser = Scripted(target, lambda b, s, p: 0.2)
    result = decode(denoiser, [1], plan(), detok, Stops(frozenset({EOS}), ("</t>",)))
    assert result.text == "ab</t>"
    assert result.stats.denoise_passes == 5  # positions 1..5, one per pass; none after the stop

"""A turn that must call is closed for the model just before its token limit, where the grammar lets
a call close; a string value cannot hold a closer's start. Checked on the constraint alone, with
clover-tiny's tokenizer (its tags are special tokens) and a byte-level one (tags as text)."""

from __future__ import annotations

import pytest
import transformers

from clovercode.engine.constraint import GrammarCompiler, Steering
from clovercode.engine.grammar import CALL_CLOSINGS, shortest_call, tool_call_grammar
from clovercode.engine.sources import tiny_model_dir
from clovercode.toolcalls.parser import parse_turn

WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                 "required": ["city"]}}
RAMBLE = ("Let me see.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
          + "Paris is a city in Europe. " * 20)


def plain_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator([RAMBLE, shortest_call(WEATHER), *CALL_CLOSINGS] * 20,
                            trainers.BpeTrainer(vocab_size=400, special_tokens=["<|end|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|end|>")


def tiny_tokenizer():
    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(tiny_model_dir() / "tokenizer.json"),
                                                eos_token="<|im_end|>")


@pytest.fixture(scope="module", params=["tags-as-text", "tags-as-tokens"])
def setup(request):
    tok = plain_tokenizer() if request.param == "tags-as-text" else tiny_tokenizer()
    return tok, GrammarCompiler(tok, len(tok), [tok.eos_token_id])


def encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def run(tok, compiler, limit: int, text: str) -> str:
    """Feed the model's wish token by token (steered tokens replace it) up to ``limit`` tokens."""
    closings = [encode(tok, c) for c in CALL_CLOSINGS]
    steering = Steering(0, (), close_at=limit - max(map(len, closings)), closings=closings)  # no prose budget here
    grammar = tool_call_grammar([WEATHER], "required", "xml", compiler.special)
    constraint = compiler.constraint(grammar, steering)
    out, wish = [], iter(encode(tok, text))
    while len(out) < limit:
        forced = constraint._steer()
        token = forced if forced is not None else next(wish)
        assert constraint.accept([token]) == 1, tok.decode(out + [token])
        out.append(token)
        if constraint.closed and forced is None:  # the model's own token after the closing: done
            break
    return tok.decode(out[:len(out) - (forced is None and constraint.closed)])


@pytest.mark.parametrize("limit", [60, 90])
def test_an_open_call_is_closed_before_the_limit(setup, limit):
    tok, compiler = setup
    turn = parse_turn(run(tok, compiler, limit, RAMBLE))
    assert not turn.errors and [c.name for c in turn.calls] == ["get_weather"]
    assert turn.calls[0].arguments["city"].startswith("Paris is a city")


def test_a_string_value_cannot_hold_a_closers_start(setup):
    tok, compiler = setup
    grammar = tool_call_grammar([WEATHER], "required", "xml", compiler.special)

    def takes(text: str) -> bool:
        ids = encode(tok, text) + [tok.eos_token_id]
        return compiler.constraint(grammar).check(ids) == len(ids)

    assert takes("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>")
    assert takes("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis</parameter>\n</function>\n</tool_call>")
    assert not takes("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis</parameter_city>\n</parameter>\n"
                     "</function>\n</tool_call>")


def test_the_shortest_call_has_its_required_parameters():
    assert shortest_call(WEATHER) == ("<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n"
                                      "</function>\n</tool_call>")


def test_no_new_call_opens_after_a_complete_one_when_even_the_shortest_would_not_fit(setup):
    tok, compiler = setup
    done = encode(tok, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                       "</tool_call>\n")
    grammar = tool_call_grammar([WEATHER], "required", "xml", compiler.special)
    early = compiler.constraint(grammar, Steering(0, (), end_at=len(done) + 5))
    assert early.accept(done) == len(done) and early._steer() is None  # room left: the model may go on
    late = compiler.constraint(grammar, Steering(0, (), end_at=len(done)))
    assert late.accept(done) == len(done) and late._steer() == tok.eos_token_id
    assert not late.permits(encode(tok, "<tool_call>")[0])


def test_the_loop_brake_yields_in_accept_where_the_grammar_leaves_nothing_else(setup):
    """SmolLM2 wrote three identical calls and opened a fourth: the brake refused the one line break
    the grammar allowed; `allowed` offered it anyway (the brake yields there) but `accept` refused
    it, so the decoder's text and the grammar parted and the reply ran on in line breaks."""
    from clovercode.engine.linerepeats import MAX_REPEATS

    tok, compiler = setup
    call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis</parameter>\n</function>\n</tool_call>\n"
    grammar = tool_call_grammar([WEATHER], "get_weather", "xml", compiler.special)
    constraint = compiler.constraint(grammar, Steering(0, (), max_repeats=MAX_REPEATS))
    ids = encode(tok, call * MAX_REPEATS + "<tool_call>\n<function=get_weather>\n")
    for token in ids:  # one at a time, as a decoder offers them
        if not constraint.permits(token):
            assert constraint.allowed()[token], tok.decode([token])  # the brake yields to the grammar
        assert constraint.accept([token]) == 1, tok.decode([token])

"""Pad and mask tokens are filler a sampled block may hold: they never reach a reply's text."""

from __future__ import annotations

import transformers

from clovercode.engine.config import EngineConfig
from clovercode.engine.engine import Engine
from clovercode.engine.loading import ModelInfo
from clovercode.engine.sources import tiny_model_dir


def test_pad_and_mask_tokens_never_reach_text_but_tags_do():
    # clover-tiny's own tokenizer, built directly (AutoTokenizer's resolution costs seconds)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tiny_model_dir() / "tokenizer.json"),
                                               pad_token="<|endoftext|>", mask_token="<|mask|>")
    pad, mask = tok.pad_token_id, tok.mask_token_id
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert len({pad, mask, eos}) == 3
    info = ModelInfo("tiny", mask, 4, True, frozenset({eos}), 512, "cpu", "float32")
    engine = Engine(None, tok, info, EngineConfig())
    ids = engine.encode("<think>\nhi\n</think>\nhello") + [pad] * 20 + [mask] * 3 + engine.encode(" world")
    assert engine.detokenize(ids) == "<think>\nhi\n</think>\nhello world"
    assert engine.detokenize([*engine.encode("done"), eos]) == "done<|im_end|>"  # the end of a turn is no filler

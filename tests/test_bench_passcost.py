"""The host-overhead measurement drives the real decode loop with its scripted stand-in: the loop must
decode exactly the scripted tokens with the scripted number of forwards (figures are not asserted)."""

import pytest

pytest.importorskip("torch")

from clovercode.bench.passcost import measure, script  # noqa: E402
from clovercode.engine.decoder import DecodePlan, decode  # noqa: E402
from clovercode.engine.stops import Stops  # noqa: E402
from test_engine_decoder import EOS, MASK, VOCAB, detok  # noqa: E402

TOKENS = list(range(26)) * 3


def test_the_stand_in_accepts_the_scripted_positions_per_pass():
    stand_in = script(TOKENS, VOCAB, 16, 8, distinct=4)
    plan = DecodePlan(block_size=16, mask_id=MASK, threshold=0.9, max_new_tokens=64)
    events = []
    result = decode(stand_in, [1, 2], plan, detok, Stops(frozenset({EOS})), on_pass=events.append)
    assert result.tokens == (TOKENS * 2)[:64]
    assert [e.accepted for e in events[:3]] == [(0,), tuple(range(1, 9)), tuple(range(9, 16))]
    assert result.stats.denoise_passes == 8 and result.stats.commits == 3  # the last block is never committed


def test_measure_reports_both_schedules():
    rows = measure(decode, detok, frozenset({EOS}), TOKENS, VOCAB, MASK, block_size=16, new_tokens=64, repeats=1)
    assert [(r.schedule, r.tokens, r.forwards) for r in rows] == [("AR B=1", 64, 63), ("threshold 0.9 B=16", 64, 11)]
    assert all(r.per_pass_us > 0 for r in rows)

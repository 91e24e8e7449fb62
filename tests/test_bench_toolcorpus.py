"""The held-out turns of `bench engine` never occur in the training data of clover-tiny.

The training stream is rebuilt as scripts/train_tiny_dlm.py builds it (turns of the train split's
TurnMaker, copy drills on, its seeds), and every held-out request and expected call is looked up in it.
The same look-up on the eval split drawn without the filter finds turns from training, so the check
can fail."""

import random

import pytest

from clovercode.bench.toolcorpus import (ALL_SEEN, NO_VALUE, TurnMaker, harvest, held_out, training_overlap,
                                         value_sets)

TRAINING_TURNS = 60_000  # per seed (the three runs of the committed model drew about 156,000 examples in all)


@pytest.fixture(scope="module")
def training():
    """Requests and call texts of the training stream (seeds 0-2 of the three training runs)."""
    maker = TurnMaker(harvest("train"), drill=2.0)
    requests, calls = set(), set()
    for seed in (0, 1, 2):
        rng = random.Random(seed)
        for _ in range(TRAINING_TURNS):
            turn = maker.turn(rng)
            requests.add(turn.request)
            calls.add(maker.call_text(turn))
    return requests, calls


@pytest.fixture(scope="module")
def bench_turns():
    return held_out(64, seed=0)


def test_no_held_out_turn_occurs_in_the_training_stream(training, bench_turns):
    requests, calls = training
    assert len(bench_turns.turns) == 64
    for turn, expected in bench_turns.turns:
        assert turn.request not in requests, turn.request
        assert expected not in calls, expected


def test_the_check_has_teeth_without_the_filter(training):
    requests, _ = training
    maker = TurnMaker(harvest("eval"))
    rng = random.Random(0)
    unfiltered = [maker.turn(rng) for _ in range(64)]
    seen = [t.request for t in unfiltered if t.request in requests]
    assert seen, "the eval split drawn without the filter should contain turns from training"


def test_every_held_out_turn_copies_a_value_training_never_held(bench_turns):
    train = value_sets(harvest("train"))
    for turn, expected in bench_turns.turns:
        unseen = [value for field, value in turn.values if value not in train[field]]
        assert unseen and any(value in expected for value in unseen), turn
        assert training_overlap(turn, train) is None


def test_excluded_turns_say_why(bench_turns):
    reasons = {reason for _, reason in bench_turns.excluded}
    assert bench_turns.excluded and reasons <= {NO_VALUE, ALL_SEEN}
    assert bench_turns.drawn == 64 + len(bench_turns.excluded)
    train = value_sets(harvest("train"))
    for turn, reason in bench_turns.excluded:
        assert training_overlap(turn, train) == reason
        if reason == NO_VALUE:
            assert not turn.values
        else:
            assert all(value in train[field] for field, value in turn.values)

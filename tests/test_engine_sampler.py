"""The sampler's free functions: proposals, nucleus filtering, and which positions a pass accepts."""

import pytest
import torch

from clovercode.engine.config import EngineConfig
from clovercode.engine.sampler import nucleus, propose, select
from clovercode.ground.errors import ConfigError


def test_greedy_proposal_is_argmax_with_its_probability():
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]])
    tokens, confidence = propose(logits)
    assert tokens.tolist() == [1, 0]
    assert torch.allclose(confidence, torch.softmax(logits, -1).max(-1).values)


def test_sampling_respects_top_p_and_seed():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    seen = set()
    for seed in range(200):
        gen = torch.Generator().manual_seed(seed)
        token, conf = propose(logits, temperature=1.0, top_p=0.8, generator=gen)
        seen.add(int(token))
        assert 0 < float(conf) <= 1
    assert seen == {0, 1}  # 0.5 + 0.3 reaches 0.8: the tail is never drawn
    again = [int(propose(logits, 1.0, 1.0, torch.Generator().manual_seed(7))[0]) for _ in range(3)]
    assert len(set(again)) == 1


def test_nucleus_keeps_the_smallest_set_and_renormalises():
    probs = torch.tensor([[0.1, 0.6, 0.3]])
    assert torch.allclose(nucleus(probs, 0.5), torch.tensor([[0.0, 1.0, 0.0]]))
    assert torch.allclose(nucleus(probs, 0.8), torch.tensor([[0.0, 2 / 3, 1 / 3]]))


def test_threshold_accepts_exactly_the_confident_masked_positions():
    confidence = torch.tensor([0.95, 0.2, 0.91, 0.99, 0.5])
    masked = torch.tensor([True, True, True, False, True])
    assert select(confidence, masked, "threshold", threshold=0.9).tolist() == [True, False, True, False, False]


def test_threshold_always_accepts_the_single_most_confident():
    confidence = torch.tensor([0.3, 0.6, 0.6, 0.99])
    masked = torch.tensor([True, True, True, False])
    # Nothing masked reaches 0.9: exactly one, the most confident, leftmost on a tie.
    assert select(confidence, masked, "threshold", threshold=0.9).tolist() == [False, True, False, False]


def test_topk_and_steps_counts():
    confidence = torch.tensor([0.1, 0.9, 0.5, 0.7, 0.3, 0.2])
    masked = torch.ones(6, dtype=torch.bool)
    assert select(confidence, masked, "topk", top_k=2).tolist() == [False, True, False, True, False, False]
    assert int(select(confidence, masked, "steps", passes_left=4).sum()) == 2  # ceil(6 / 4)
    assert bool(select(confidence, masked, "steps", passes_left=1).all())
    assert not bool(select(confidence, torch.zeros(6, dtype=torch.bool), "topk", top_k=3).any())


@pytest.mark.parametrize("changes, word", [
    ({"threshold": 0.0}, "threshold"), ({"threshold": 1.5}, "threshold"), ({"strategy": "beam"}, "strategy"),
    ({"block_size": -1}, "block_size"), ({"top_p": 0.0}, "top_p"), ({"dtype": "int8"}, "dtype"),
    ({"device": "tpu"}, "device"), ({"steps": 0}, "steps"), ({"max_new_tokens": 0}, "max_new_tokens"),
])
def test_engine_config_is_validated_on_construction(changes, word):
    with pytest.raises(ConfigError, match=word):
        EngineConfig(**changes)


def test_engine_config_copies_are_validated_too():
    config = EngineConfig(block_size=16)
    assert config.with_(threshold=0.7).threshold == 0.7
    with pytest.raises(ConfigError):
        config.with_(top_k=0)


@pytest.mark.parametrize("seed", range(40))
def test_select_on_the_device_equals_select(seed):
    """select_ranked (no host sync) chooses exactly what select chooses, ties and fallbacks included."""
    import math
    import random

    from clovercode.engine.sampler import select_ranked

    rng = random.Random(seed)
    size = rng.choice([2, 5, 16])
    confidence = torch.tensor([rng.choice([0.3, 0.5, 0.9, 0.95, rng.random()]) for _ in range(size)])
    masked = torch.tensor([rng.random() < 0.7 for _ in range(size)])
    masked[rng.randrange(size)] = True
    ranked = confidence + torch.where(masked, 0.0, -2.0)
    remaining, left = int(masked.sum()), rng.choice([1, 2, 4])
    for strategy, count in (("threshold", 0), ("topk", min(3, remaining)),
                            ("steps", remaining if left <= 1 else math.ceil(remaining / left))):
        expected = select(confidence, masked, strategy, threshold=0.9, top_k=3, passes_left=left)
        assert select_ranked(ranked, strategy, threshold=0.9, count=count).tolist() == expected.tolist()

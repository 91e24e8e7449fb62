"""Constrained decoding in the block loop and through the embedded backend.

The property test drives the real decoder with a denoiser at the model seam that returns random
logits (a confident random token per row, a pull towards a valid call, noise) and checks, at every
forward the decoder asks for, that the final tokens (committed output plus the block's leading run)
form a valid grammar prefix: a token the grammar forbids is never accepted. The other tests run the
trained clover-tiny model: already-valid output must come out token for token unchanged, and the
backend must honour tool_choice."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("llguidance")

from rich.console import Console  # noqa: E402

from clovercode.ground.messages import Message  # noqa: E402
from clovercode.backends.base import Finish, GenerationParams, TextDelta  # noqa: E402
from clovercode.backends.embedded import EmbeddedBackend  # noqa: E402
from clovercode.bench.engine import held_out_turns  # noqa: E402
from clovercode.engine.chat import render_prompt  # noqa: E402
from clovercode.engine.config import EngineConfig  # noqa: E402
from clovercode.engine.decoder import DecodePlan, decode  # noqa: E402
from clovercode.engine.denoiser import CachedDenoiser  # noqa: E402
from clovercode.engine.engine import Engine  # noqa: E402
from clovercode.engine.constraint import Steering  # noqa: E402
from clovercode.engine.grammar import CALL_OPENING, tool_call_grammar  # noqa: E402
from clovercode.engine.stops import Stops  # noqa: E402
from clovercode.toolcalls.parser import parse_turn  # noqa: E402
from clovercode.toolcalls.render import render_call  # noqa: E402
from clovercode.toolcalls.schemas import load_tool_specs  # noqa: E402
from clovercode.toolcalls.validate import Validator  # noqa: E402

SPECS = load_tool_specs()
TOOLS = [{"name": s.name, "parameters": s.parameters} for s in SPECS]


@pytest.fixture(scope="module")
def engine():
    engine = Engine.open("clover-tiny", EngineConfig(max_new_tokens=128, dtype="float32"), Console(stderr=True))
    yield engine
    engine.close()


class RandomDenoiser:
    """Random logits at the model seam; checks the decoder's final tokens at every call."""

    def __init__(self, rng: random.Random, vocab: int, mask_id: int, target: list[int], fresh, pull: float):
        self.rng, self.vocab, self.mask_id, self.target, self.fresh, self.pull = rng, vocab, mask_id, target, fresh, pull
        self.committed: list[int] = []
        self.checks = 0

    def _rows(self, start: int, count: int):
        gen = torch.Generator().manual_seed(self.rng.randrange(2**31))
        logits = torch.randn(count, self.vocab, generator=gen)
        for row in range(count):
            logits[row, self.rng.randrange(self.vocab)] += self.rng.choice([2.0, 8.0, 14.0])  # often forbidden
            where = start + row
            if where < len(self.target) and self.rng.random() < self.pull:
                logits[row, self.target[where]] += self.rng.choice([4.0, 12.0])
        logits[:, self.mask_id] = float("-inf")  # a model never predicts the mask
        return logits

    def _check(self, tokens: list[int]) -> None:
        self.checks += 1
        assert self.fresh().check(tokens) == len(tokens), "a token the grammar forbids was accepted"

    def prefill(self, ids):
        return SimpleNamespace(last_logits=self._rows(0, 1)[0])

    def denoise(self, state, block):
        first = int((block == self.mask_id).int().argmax()) if bool((block == self.mask_id).any()) else len(block)
        self._check(self.committed + block[:first].tolist())
        return self._rows(len(self.committed) + 1, len(block))

    def commit(self, state, block):
        self.committed += block.tolist()
        self._check(self.committed)
        state.last_logits = self._rows(len(self.committed), 1)[0]
        return state


@pytest.mark.parametrize("seed", range(24))
def test_random_logits_never_make_a_forbidden_token_final(engine, seed):
    rng = random.Random(seed)
    compiler = engine.grammar_compiler()
    choice = rng.choice(["required", "auto", "edit_file", "view_file"])
    grammar = tool_call_grammar(TOOLS, choice, "xml", compiler.special)
    name = choice if choice not in ("auto", "required") else rng.choice([s.name for s in SPECS])
    spec = next(s for s in SPECS if s.name == name)
    arguments = {k: "x" if spec.schema["properties"][k].get("type") == "string" else 3
                 for k in spec.schema.get("required", [])}
    target = engine.encode("Plan.\n" + render_call(name, arguments, spec))
    mask_id = engine.info.mask_token_id
    fresh = lambda: compiler.constraint(grammar)  # noqa: E731
    denoiser = RandomDenoiser(rng, len(engine.tokenizer), mask_id, target, fresh, pull=rng.choice([0.3, 0.7, 0.95]))
    strategy = rng.choice(["threshold", "topk", "steps"])
    plan = DecodePlan(block_size=rng.choice([1, 4, 8, 16]), mask_id=mask_id, strategy=strategy,
                      threshold=rng.choice([0.3, 0.7, 0.9]), top_k=rng.choice([1, 3]), steps=rng.choice([2, 4]),
                      temperature=rng.choice([0.0, 0.0, 1.0]), max_new_tokens=rng.choice([24, 64]))
    constraint = fresh()
    if choice != "auto" and rng.random() < 0.5:  # steered into the call
        steering = Steering(rng.choice([3, 12]), engine.encode(CALL_OPENING))
        constraint = compiler.constraint(grammar, steering)
    result = decode(denoiser, [1, 2], plan, engine.detokenize, Stops(engine.info.eos_ids, ("</tool_call>",)),
                    constraint=constraint, generator=torch.Generator().manual_seed(seed))
    assert fresh().check(result.tokens) == len(result.tokens)
    assert denoiser.checks > 0


def test_the_first_masked_position_never_proposes_a_forbidden_token(engine):
    from clovercode.engine.sampler import propose

    compiler = engine.grammar_compiler()
    constraint = compiler.constraint(tool_call_grammar(TOOLS, "required", "xml", compiler.special))
    constraint.accept(engine.encode("<tool_call>\n<function=view_file>\n<parameter=start_line>\n"))
    allowed = constraint.allowed()
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        logits = torch.randn(4, len(engine.tokenizer), generator=gen) * 6
        tokens, confidence = propose(logits, 0.0, 1.0, None, {0: allowed})
        assert bool(allowed[tokens[0]])
        # confidence is the model's own probability of the chosen token, not a renormalised one
        assert float(confidence[0]) == pytest.approx(float(torch.softmax(logits[0], -1)[tokens[0]]))


@pytest.mark.slow
@pytest.mark.parametrize("block_size", [1, 16])
def test_valid_output_comes_out_unchanged_on_held_out_turns(engine, block_size):
    """The constraint only removes what the grammar forbids: where clover-tiny's unconstrained call
    is already valid, the constrained decode is the same tokens (and the same number of forwards)."""
    compiler = engine.grammar_compiler()
    grammar = tool_call_grammar(TOOLS, "required", "xml", compiler.special)
    validator = Validator(SPECS)
    stops = engine.stops(("</tool_call>",))
    plan = engine.plan(block_size=block_size)
    same = fixed = 0
    for turn, _ in held_out_turns(16, seed=3):
        prompt = engine.encode(render_prompt(engine.tokenizer, [Message("user", turn.request)], (), False))
        free = engine.generate(prompt, plan, stops, denoiser=CachedDenoiser(engine.model))
        held = engine.generate(prompt, plan, stops, denoiser=CachedDenoiser(engine.model),
                               constraint=compiler.constraint(grammar))
        parsed = parse_turn(held.text)
        assert parsed.calls and not parsed.errors and all(validator.check(c, "c").ok for c in parsed.calls)
        free_turn = parse_turn(free.text)
        if free_turn.calls and not free_turn.errors and all(validator.check(c, "c").ok
                                                             for c in free_turn.calls):
            assert held.tokens == free.tokens and held.stats.forwards == free.stats.forwards
            same += 1
        else:
            fixed += 1
    assert same >= 12, f"only {same} of 16 held-out turns were valid without the constraint"


@pytest.mark.parametrize("choice", ["required", "finish", "none"])
def test_the_backend_honours_tool_choice(engine, choice):
    backend = EmbeddedBackend(engine)
    request = held_out_turns(1, seed=11)[0][0].request
    params = GenerationParams(max_new_tokens=96, stop=("</tool_call>",), thinking=False, tool_choice=choice)
    events = list(backend.generate([Message("user", request)], SPECS, params))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    turn = parse_turn(text)
    assert isinstance(events[-1], Finish)
    if choice == "none":
        assert not turn.calls and "<tool_call>" not in text
    else:
        [call] = turn.calls
        assert Validator(SPECS).check(call, "c").ok
        assert choice == "required" or call.name == choice

"""The memory plan is applied: with the free memory read at its one seam (engine/memory.py
``free_bytes``) patched so that the plan holds 1,024 positions, the engine's limit is 1,024, and a
2,048-token prompt is refused before it runs, naming the limit and the weights mode that would hold
it: by the embedded backend (the REPL, fix, ACP), by `exec` (exit 5, no traceback) and by `serve`
(400, OpenAI's context_length_exceeded). The 4,096-token window of clover-tiny was kept before."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import cli_env, run_cli
from rich.console import Console

from clovercode.backends.base import ContextTooLong, GenerationParams
from clovercode.backends.embedded import EmbeddedBackend
from clovercode.context.prompt import Budget, ContextPrompt
from clovercode.ground.conversation import Conversation
from clovercode.engine import memory, memplan, weightplan
from clovercode.engine.config import EngineConfig
from clovercode.engine.sources import tiny_model_dir
from clovercode.ground.messages import Message

BLOCK = 16  # clover-tiny's block size


def tiny_shape() -> memplan.ModelShape:
    """clover-tiny as the CPU loads it (float32), from its config and safetensors header alone."""
    folder = tiny_model_dir()
    counts = weightplan.checkpoint_size(folder).counts
    return memplan.shape_from_config(json.loads((folder / "config.json").read_text()), dtype_bytes=4,
                                     weights_bytes=counts.total * 4)


def free_after_weights(positions: int, single: bool) -> int:
    """What free memory (after the weights) makes clover-tiny's plan hold exactly ``positions``: the
    middle of the range between the least total memory that holds it and the least that holds a chunk more."""
    shape, config = tiny_shape(), EngineConfig()

    def least(wanted: int) -> int:
        low, high = 0, 1 << 40
        while low < high:
            middle = (low + high) // 2
            held = memplan.max_context(shape, free_bytes=middle, utilisation=config.memory_utilization, block=BLOCK,
                                       prompt_cache_tokens=config.prompt_cache_tokens, single=single)
            low, high = (low, middle) if held >= wanted else (middle + 1, high)
        return low

    return (least(positions) + least(positions + memplan.CHUNK_TOKENS)) // 2 - shape.weights_bytes


def words(tokens: int) -> str:
    """Text of about ``tokens`` clover-tiny tokens (``w<i>`` is two or three)."""
    return " ".join(f"w{i}" for i in range(tokens // 2))


@pytest.fixture(scope="module")
def engine():
    from clovercode.engine.engine import Engine

    patch = pytest.MonkeyPatch()
    patch.setattr(memory, "free_bytes", lambda device: free_after_weights(1024, single=True))
    loaded = Engine.open("clover-tiny", EngineConfig(), Console(file=io.StringIO()))
    yield loaded
    patch.undo()
    loaded.close()


@pytest.mark.slow
def test_the_plan_sets_the_limit_and_a_prompt_over_it_is_refused_naming_the_mode_that_fits(engine):
    limit = engine.context_limit()
    assert (limit.positions, limit.wanted, limit.from_plan) == (1024, 4096, True)  # the window was 4,096
    assert engine.max_context == 1024 and engine.denoiser().limit == memplan.round_up(1024 + BLOCK)
    backend = EmbeddedBackend(engine)
    assert backend.context_window == 1024  # what the context layer fits prompts in, and serve's max_model_len
    with pytest.raises(ContextTooLong) as err:
        backend.prepare([Message("user", words(2048))], [], GenerationParams(max_new_tokens=16))
    text = str(err.value)
    assert "does not fit: the memory plan holds 1,024 positions for one sequence on cpu" in text
    assert "GiB free after the unquantized weights" in text and err.value.window == 1024
    assert "no weights mode holds" in text and "the most: fp8, 1,536 positions" in text  # clover-tiny: transients rule
    assert limit.advice(1200) == "fp8 weights would fit 1,536 positions (engine.quantization = fp8)"
    prompt, plan = backend.prepare([Message("user", "hello")], [], GenerationParams(max_new_tokens=4096))
    assert plan.max_new_tokens == 1024 - len(prompt)  # a reply is held to the limit too


@pytest.mark.slow
def test_serve_answers_400_context_length_exceeded_over_a_slots_limit(engine, monkeypatch):
    import openai
    from serve_helpers import client, running_server

    monkeypatch.setattr(memory, "free_bytes", lambda device: free_after_weights(1024, single=False))
    monkeypatch.setattr(engine, "limits", engine.plan_limits())  # as if loaded with this much free
    backend = EmbeddedBackend(engine)
    with running_server(backend, max_batch=4) as app:  # batching: a slot's limit applies
        assert engine.batched and backend.context_window == 1024
        with pytest.raises(openai.BadRequestError) as err:
            client(f"http://127.0.0.1:{app.port}/v1").chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": words(2048)}], max_tokens=8)
    body = err.value.body
    assert err.value.status_code == 400 and body["code"] == "context_length_exceeded"
    assert body["message"].startswith("This model's maximum context length is 1024 tokens.")
    assert "the memory plan holds 1,024 positions for each slot of the batch on cpu" in body["message"]
    engine.batched = False


@pytest.mark.slow
def test_exec_refuses_a_prompt_over_the_plans_limit_with_exit_5_and_no_traceback(tmp_path):
    site = tmp_path / "site"
    site.mkdir()  # the free-memory reading patched at its seam inside the real CLI process
    (site / "sitecustomize.py").write_text("from clovercode.engine import memory\n"
                                           f"memory.free_bytes = lambda device: {free_after_weights(1024, True)}\n")
    project = tmp_path / "project"
    project.mkdir()
    env = cli_env(HOME=str(tmp_path))
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    proc = run_cli("exec", "-m", "clover-tiny", "--sandbox", "none", "--json", words(2048), cwd=project, env=env,
                   timeout=300)
    assert proc.returncode == 5, proc.stderr[-2000:]
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    error = next(e for e in events if e["type"] == "error")
    assert error["exit_code"] == 5 and "does not fit: the memory plan holds 1,024 positions" in error["message"]
    assert "engine.quantization" in error["message"]
    assert "Traceback" not in proc.stderr and not any(e["type"] == "model_text" for e in events)


@pytest.mark.slow
def test_a_device_that_holds_not_one_chunk_beside_the_weights_is_refused_at_load(engine, monkeypatch):
    from clovercode.engine import engine as engine_module
    from clovercode.engine.engine import Engine
    from clovercode.ground.errors import ModelUnavailable

    monkeypatch.setattr(engine_module, "load", lambda *args: (engine.model, engine.tokenizer, engine.info))
    monkeypatch.setattr(memory, "free_bytes", lambda device: 100 * 2 ** 20)  # the weights fit, no context does
    with pytest.raises(ModelUnavailable) as err:
        Engine.open("clover-tiny", EngineConfig(), Console(file=io.StringIO()))
    assert "not enough memory to run clover-tiny: the memory plan holds 0 positions for one sequence" in err.value.message
    assert err.value.hint.startswith("Quantized weights: no")
    assert engine.model is not None  # (the fixture's own engine is untouched)


# ---- without a model --------------------------------------------------------------------------------

def test_the_whole_window_is_the_limit_when_it_fits_even_off_a_chunk():
    shape = tiny_shape()
    odd = memplan.ModelShape(**{**shape.__dict__, "context_window": 1000})
    assert memplan.max_context(odd, free_bytes=1 << 40, block=BLOCK) == 1000
    assert memplan.max_context(shape, free_bytes=free_after_weights(1024, True) + shape.weights_bytes, block=BLOCK,
                               prompt_cache_tokens=EngineConfig().prompt_cache_tokens) == 1024


def test_advice_names_the_most_precise_mode_that_holds_the_prompt():
    limit = memory.ContextLimit(2048, 8192, 10 << 30, "cuda", "none", {"fp8": 4096, "int8": 4096, "int4": 9216})
    assert limit.advice(3000) == "fp8 weights would fit 4,096 positions (engine.quantization = fp8)"
    assert limit.advice(9000) == "int4 weights would fit 9,216 positions (engine.quantization = int4)"
    assert limit.advice(20000).startswith("no weights mode holds 20,000 (the most: int4, 9,216 positions")
    assert memory.ContextLimit(2048, 8192, 0, "cuda", "int4", {}).advice(3000) == "no smaller weights mode holds more"


def _prompt(refuse) -> ContextPrompt:
    return ContextPrompt(root=Path("/nonexistent"), base_system="You are a test agent.", repo_map="", tools_tokens=0,
                         count=lambda text: len(text.split()), exact=True,
                         budget=Budget(1024, 128, 0.8, 0.2, 2000, 4), instructions=False, refuse_task=refuse)


def test_a_task_over_the_plans_window_is_refused_not_cut_and_cut_as_before_where_the_model_sets_it():
    conversation = Conversation()
    conversation.add(Message("user", "word " * 2048, tags=frozenset({"goal"})))
    asked = []

    def refuse(tokens):
        asked.append(tokens)
        return ContextTooLong(f"the prompt ({tokens} tokens) does not fit")

    with pytest.raises(ContextTooLong, match="does not fit"):
        _prompt(refuse).build(conversation)
    assert asked and asked[0] > 2048 and conversation.messages[0].content == "word " * 2048  # untouched
    _prompt(lambda tokens: None).build(conversation)  # the model's own window: cut in the middle, as before
    assert len(conversation.messages[0].content) < len("word " * 2048)

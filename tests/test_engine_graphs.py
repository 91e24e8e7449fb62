"""The static cache behind engine.compile (engine/staticcache.py, engine/graphs.py), run eagerly on the
CPU: it must decode exactly what the dynamic cache decodes (float64 tiny models), keep committed state
through denoising passes, grow past its capacity, and reuse prompts. CUDA graph capture itself only
runs on a GPU (scripts/gpu_check.sh); the load arguments that put weights straight on the GPU are
checked here."""

import pytest
import torch

from clovercode.engine import cachestate
from clovercode.engine.config import EngineConfig
from clovercode.engine.decoder import DecodePlan, decode
from clovercode.engine.denoiser import CachedDenoiser
from clovercode.engine.graphs import StaticDenoiser, capacity_for, wants_graphs
from clovercode.engine.loading import weights_kwargs
from clovercode.engine.stops import Stops
from clovercode.ground.errors import ConfigError
from tinymodels import EOS_ID, MASK_ID, tiny_hybrid, tiny_llama, tiny_qwen3

PROMPT = list(range(3, 30))
STOPS = Stops(frozenset({EOS_ID}))


@pytest.fixture(scope="module")
def models():
    return {"llama": tiny_llama(), "qwen3": tiny_qwen3(), "hybrid": tiny_hybrid()}


@pytest.mark.parametrize("name", ["llama", "qwen3", "hybrid"])
@pytest.mark.parametrize("block", [1, 4, 8])
def test_static_passes_decode_what_the_dynamic_cache_decodes(models, name, block):
    plan = DecodePlan(block_size=block, mask_id=MASK_ID, threshold=0.9, max_new_tokens=40)
    expected = decode(CachedDenoiser(models[name]), PROMPT, plan, str, STOPS)
    static = StaticDenoiser(models[name], graphs=False)
    got = decode(static, PROMPT, plan, str, STOPS)
    assert got.tokens == expected.tokens
    assert got.stats.forwards == expected.stats.forwards
    assert static.graph_error is None and static.passes.captured == 0  # no CUDA here: eager static passes


@pytest.mark.parametrize("name", ["qwen3", "hybrid"])
def test_the_static_cache_grows_past_its_capacity(models, name):
    plan = DecodePlan(block_size=4, mask_id=MASK_ID, threshold=0.9, max_new_tokens=40)
    expected = decode(CachedDenoiser(models[name]), PROMPT, plan, str, STOPS)
    static = StaticDenoiser(models[name], graphs=False, min_capacity=32, headroom=4)
    got = decode(static, PROMPT, plan, str, STOPS)
    assert static.passes.kv.capacity == 128  # 27 + 4 fit in 32; the answer (up to 67) grew it twice
    assert got.tokens == expected.tokens


@pytest.mark.parametrize("name", ["llama", "hybrid"])
def test_denoise_passes_leave_the_committed_static_state_alone(models, name):
    static = StaticDenoiser(models[name], graphs=False, min_capacity=64)
    state = static.commit(static.prefill(PROMPT), torch.arange(40, 48))
    kv = static.passes.kv

    def committed():
        found = []
        for key, tensor in cachestate.state_tensors(kv.cache):
            if key.endswith((".keys", ".values")):
                tensor = tensor[:, :, :state.length]  # rows past the committed length are scratch
            found.append((key, tensor.clone()))
        return found

    before = committed()
    block = torch.full((8,), MASK_ID)
    for step in range(3):
        block[step] = 50 + step
        static.denoise(state, block)
    after = committed()
    assert [k for k, _ in before] == [k for k, _ in after]
    assert all(torch.equal(b, a) for (_, b), (_, a) in zip(before, after))
    assert kv.attention_layers()[0].length == state.length == len(PROMPT) + 8


def test_prompt_reuse_through_the_static_cache(models):
    model = models["hybrid"]
    plan = DecodePlan(block_size=4, mask_id=MASK_ID, threshold=0.9, max_new_tokens=12)
    static = StaticDenoiser(model, graphs=False, reuse_prompt=True)
    first = decode(static, PROMPT, plan, str, STOPS)
    longer = PROMPT + first.tokens + [7, 8, 9]
    again = decode(static, longer, plan, str, STOPS)
    assert static.reused_tokens == len(PROMPT)
    assert again.tokens == decode(CachedDenoiser(model), longer, plan, str, STOPS).tokens


def test_a_cache_the_static_one_cannot_hold_stays_dynamic():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                         use_sliding_window=True, sliding_window=16, max_window_layers=0, attn_implementation="sdpa")
    model = Qwen3ForCausalLM(config).double().eval()
    plan = DecodePlan(block_size=1, mask_id=None, max_new_tokens=12)  # sliding windows decode autoregressively
    static = StaticDenoiser(model, graphs=False)
    got = decode(static, PROMPT, plan, str, Stops())
    assert got.tokens == decode(CachedDenoiser(model), PROMPT, plan, str, Stops()).tokens
    assert static.unsupported == "cache layer DynamicSlidingWindowLayer" and static.passes is None


def test_compile_setting_picks_the_static_denoiser_and_graphs_only_on_cuda(models):
    from clovercode.engine.engine import Engine
    from clovercode.engine.loading import ModelInfo

    info = ModelInfo("tiny", MASK_ID, 4, True, frozenset({EOS_ID}), 512, "cpu", "float64")
    assert isinstance(Engine(models["llama"], None, info, EngineConfig(compile="auto")).denoiser(), CachedDenoiser)
    static = Engine(models["llama"], None, info, EngineConfig(compile="static")).denoiser()
    assert isinstance(static, StaticDenoiser)
    static.prefill(PROMPT)
    assert static.passes.graphs is False  # graphs need a CUDA device; the static passes run eagerly
    assert wants_graphs("auto", "cuda:0") and not wants_graphs("auto", "cpu") and not wants_graphs("off", "cuda")
    assert wants_graphs("static", "cpu")  # asked for; StaticPasses still only captures on a CUDA device
    assert [capacity_for(n, 1024) for n in (1, 1024, 1025, 5000, 8193, 33000)] == [1024, 1024, 2048, 8192, 16384,
                                                                                  40960]
    with pytest.raises(ConfigError, match="engine.compile must be one of off, auto, static"):
        EngineConfig(compile="graphs")


def test_engine_compile_is_a_setting_like_the_others(tmp_path):
    from clovercode.ground.config import load_config
    from clovercode.engine.config import engine_config_from

    (tmp_path / "clovercode.toml").write_text('[engine]\ncompile = "auto"\n')
    assert engine_config_from(load_config(tmp_path, {"HOME": str(tmp_path)}, {}, trust_project=True)).compile == "auto"
    assert engine_config_from(load_config(tmp_path, {"HOME": str(tmp_path)}, {})).compile == "off"  # not trusted
    assert engine_config_from(load_config(tmp_path / "none", {"HOME": str(tmp_path)}, {})).compile == "off"
    with pytest.raises(ConfigError, match="compile"):
        load_config(tmp_path, {"HOME": str(tmp_path), "CLOVERCODE_ENGINE_COMPILE": "always"}, {})


def test_weights_load_straight_onto_the_gpu():
    on_gpu = weights_kwargs(torch.bfloat16, "cuda:1", False)
    assert on_gpu == {"dtype": torch.bfloat16, "trust_remote_code": False, "attn_implementation": "sdpa",
                      "use_kernels": False, "device_map": "cuda:1"}
    assert "device_map" not in weights_kwargs(torch.float32, "cpu", True)


def test_no_load_fetches_kernels_from_the_hub():
    """transformers 5.25 turns Hub kernels on by default where the `kernels` package is installed: on the
    H200 (offline) every load failed with "Version 2 of 'kernels-community/rotary' is not available"."""
    for device in ("cpu", "cuda"):
        for trust in (False, True):
            assert weights_kwargs(torch.bfloat16, device, trust)["use_kernels"] is False

"""The map's budget, counted by real tokenizers: fitted with the model's own tokenizer it is never over,
and fitted with the estimate (no tokenizer known) it is never over either, on code in several languages."""

from pathlib import Path

import pytest
from conftest import make_git_repo

from clovercode.ground.messages import Message
from clovercode.agent.prompts import Conversation
from clovercode.ground.config import load_config
from clovercode.context.assemble import ContextAssembler
from clovercode.context.index import IndexOptions, build_index
from clovercode.context.repomap import make_repo_map
from clovercode.context.tokens import estimate_tokens

REPO = Path(__file__).resolve().parents[1]
BUDGETS = (12, 40, 100, 250, 600, 1500, 4000)


@pytest.fixture(scope="module")
def smollm2_count():
    """SmolLM2-135M's tokenizer (49k BPE), read from the demo model's GGUF the project ships with."""
    transformers = pytest.importorskip("transformers")
    from clovercode.engine.sources import smollm2_gguf

    gguf = smollm2_gguf()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


@pytest.fixture(scope="module")
def tiny_count():
    """clover-tiny's tokenizer (a 2k-vocabulary BPE: about twice as many tokens as the estimate assumes)."""
    tokenizers = pytest.importorskip("tokenizers")
    from clovercode.engine.sources import tiny_model_dir

    tokenizer = tokenizers.Tokenizer.from_file(str(tiny_model_dir() / "tokenizer.json"))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    """Python (clovercode itself) and the sample project (TypeScript, TSX, JavaScript, Go, Rust, Java, C, C++)."""
    sample = make_git_repo(tmp_path_factory.mktemp("sample") / "repo", REPO / "tests" / "fixtures" / "context")
    return [build_index(REPO / "clovercode", IndexOptions(cache_dir=None)), build_index(sample, IndexOptions(cache_dir=None))]


@pytest.mark.slow
def test_estimated_maps_never_exceed_the_budget_in_a_real_tokenizer(indexes, smollm2_count):
    for index in indexes:
        for focus in ([], index.paths[:1]):
            for budget in BUDGETS:
                repo_map = make_repo_map(index, budget, estimate_tokens, focus_files=focus)
                real = smollm2_count(repo_map.text)
                assert real <= budget, (index.root, focus, budget, real)
                if repo_map.shown < min(index.definition_count, 50) and budget >= 250:
                    assert real >= 0.7 * budget  # errs high, but not by so much that the map shrinks for nothing


@pytest.mark.slow
def test_the_estimate_errs_high_on_code_and_prose(indexes, smollm2_count):
    text = make_repo_map(indexes[0], 100_000).text
    chunks = [text[i:i + 4000] for i in range(0, len(text), 4000)]
    prose = (REPO / "docs" / "context.md").read_text(encoding="utf-8")
    for chunk in [*chunks, prose]:
        assert smollm2_count(chunk) <= estimate_tokens(chunk)


class TokenizerBackend:
    """What a session sees of a backend with its own tokenizer (the embedded engine offers the same)."""

    def __init__(self, count, window: int = 32768):
        self.count_tokens, self.context_window = count, window


@pytest.mark.parametrize("which", ["smollm2_count", "tiny_count"])
def test_a_sessions_map_is_fitted_with_the_models_tokenizer(tmp_path, request, which):
    if which == "smollm2_count":
        pytest.importorskip("transformers")
    count = request.getfixturevalue(which)
    root = make_git_repo(tmp_path / "repo", REPO / "tests" / "fixtures" / "context")
    for map_tokens in (60, 300, 1200):
        cfg = load_config(None, {}, {"context.map_tokens": map_tokens, "context.cache": False})
        prompt = ContextAssembler(root, cfg, {"HOME": str(tmp_path)}, False).prompt_for(
            Conversation(), "Why does fetchUsers drop the last page?", [], TokenizerBackend(count), 256)
        assert prompt.exact
        prompt.build(Conversation([Message("user", "Why does fetchUsers drop the last page?")]))
        assert prompt.repo_map and count(prompt.repo_map) <= map_tokens
        if map_tokens == 300:  # (at 60 a line is a large share; the sample runs out before 1200)
            assert count(prompt.repo_map) >= 0.6 * map_tokens

"""Fixtures shared by the engine tests that load real models."""

import pytest


@pytest.fixture(scope="session")
def model_cache(request, tmp_path_factory):
    """Where converted models go: pytest's cache directory, so the GGUF demo model converts once per
    checkout rather than once per run (a fresh temporary directory when the cache plugin is off)."""
    cache = getattr(request.config, "cache", None)
    return cache.mkdir("clovercode-models") if cache is not None else tmp_path_factory.mktemp("models")

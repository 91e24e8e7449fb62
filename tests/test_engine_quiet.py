"""Issue 49.2: a model load writes nothing to the screen but clovercode's own lines; what the libraries
say goes to the model-load log (clovercode/engine/quiet.py)."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from conftest import cli_env

from clovercode.engine.quiet import library_noise


def test_library_advisories_go_to_the_log_and_errors_still_reach_their_handlers(tmp_path: Path) -> None:
    logger = logging.getLogger("torchao.kernel")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    torchao = logging.getLogger("torchao")
    kept = Keep()
    torchao.addHandler(kept)
    try:
        with library_noise(tmp_path / "logs" / "model-load.log") as noise:
            logger.warning("Failed to load %s", "/x/torchao/_C_cutlass_90a.so")
            logger.error("the weights are damaged")
            warnings.warn("a deprecation", DeprecationWarning, stacklevel=1)
        assert seen == ["the weights are damaged"]  # an error is not noise
        assert torchao.handlers[-1] is kept  # put back as they were
        log = (tmp_path / "logs" / "model-load.log").read_text()
        assert "Failed to load /x/torchao/_C_cutlass_90a.so" in log and "a deprecation" in log
        assert noise.summary("cpu") == []  # CUDA kernels missing on a CPU change nothing
        assert "slower" in noise.summary("cuda:0")[0]
    finally:
        torchao.removeHandler(kept)


@pytest.mark.slow
def test_a_quantized_load_prints_only_clovercodes_own_lines(tmp_path: Path) -> None:
    pytest.importorskip("torchao")
    # A fresh process: torchao's complaints come when it is first imported, inside the load.
    code = ("from clovercode.engine.engine import Engine; from clovercode.engine.config import EngineConfig;"
            "Engine.open('clover-tiny', EngineConfig(quantization='int4', max_new_tokens=4))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and all(line.startswith("Loading clover-tiny") for line in lines), lines

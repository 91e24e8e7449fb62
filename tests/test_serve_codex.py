"""The current Codex CLI (npm @openai/codex, pinned in tests/npm_fixtures.py) runs `codex exec` against
`clovercode serve` with `wire_api = "responses"`: a turn with a function call, its output sent back,
and a final answer. The model seam is a scripted backend; everything on the wire is real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator, Sequence

import pytest
from npm_fixtures import NpmUnavailable, codex_cli
from serve_helpers import running_server

from clovercode.backends.base import Event, Finish, GenerationParams, TextDelta, Usage
from clovercode.ground.messages import Message
from clovercode.toolcalls.schemas import ToolSpec

KEY = "sk-codex-0123456789"


class ScriptedCodexModel:
    """First a call of Codex's own shell tool, then an answer quoting what the call returned. The
    command is this script's fixed `echo`, so Codex runs it outside its sandbox (whose helper binary
    it cannot place under a temporary CODEX_HOME)."""

    name = "scripted"
    context_window = 65536

    def __init__(self):
        self.requests: list[tuple[list[Message], list[str]]] = []

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        self.requests.append((list(messages), [t.name for t in tools]))
        last = messages[-1]
        if last.role == "tool":
            text = f"The command said: {last.content.strip().splitlines()[-1][:80]}"
        else:
            text = ("<think>\nRun it.\n</think>\n\nRunning it.\n<tool_call>\n<function=exec_command>\n<parameter=cmd>\n"
                    "echo clover-marker\n</parameter>\n</function>\n</tool_call>")
        yield TextDelta(text)
        yield Usage(prompt_tokens=sum(len(m.content) for m in messages) // 4, completion_tokens=len(text) // 4)
        yield Finish("stop")

    def close(self) -> None:
        pass


def _codex() -> Path:
    if shutil.which("node") is None:
        pytest.skip("node is not installed (scripts/setup.sh --tests installs Node.js and npm)")
    try:
        return codex_cli()
    except NpmUnavailable as exc:
        pytest.skip(f"the Codex CLI could not be installed from npm: {exc}")


def test_codex_exec_completes_a_turn_with_a_function_call(tmp_path: Path) -> None:
    codex = _codex()
    home, project = tmp_path / "codex-home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    model = ScriptedCodexModel()
    with running_server(model, api_key=KEY) as app:
        (home / "config.toml").write_text(
            'model = "test-model"\nmodel_provider = "clover"\nweb_search = "disabled"\n'
            "[agents]\nenabled = false\n"  # its sub-agent tools come as a tool namespace, which serve refuses
            f'[model_providers.clover]\nname = "clover"\nbase_url = "http://127.0.0.1:{app.port}/v1"\n'
            'wire_api = "responses"\nenv_key = "CLOVER_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n',
            encoding="utf-8")
        proc = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "--json", "--sandbox", "danger-full-access",
                               "run the marker command"], cwd=project, stdin=subprocess.DEVNULL,
                              env={**os.environ, "CODEX_HOME": str(home), "CLOVER_KEY": KEY},
                              capture_output=True, text=True, timeout=120)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert events[-1]["type"] == "turn.completed", events
    items = [e["item"] for e in events if e["type"] == "item.completed"]
    commands = [i for i in items if i["type"] == "command_execution"]
    assert commands and "clover-marker" in commands[0]["command"], items
    answer = [i["text"] for i in items if i["type"] == "agent_message"][-1]
    assert answer.startswith("The command said:"), items
    assert len(model.requests) == 2
    second, tools = model.requests[1]
    assert "exec_command" in tools
    assert [m.role for m in second[-2:]] == ["assistant", "tool"]
    assert second[-2].tool_calls[0].name == "exec_command"

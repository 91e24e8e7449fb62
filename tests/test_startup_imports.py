"""Issue 49.1: the paths that must answer quickly import only what they use. `python -X importtime`
lists every module a real run loaded; a heavy one on a path that never needs it fails the test.

The targets themselves (seconds) are measured by hand and kept in README's table: times are noise on
these machines, the list of modules is not.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cli_env, write_replay

# Each costs a noticeable part of a second (or many seconds) to import on 2 cores.
HEAVY = ("torch", "transformers", "rich.markdown", "markdown_it", "pygments", "rich.syntax", "jsonschema",
         "numpy", "tree_sitter", "prompt_toolkit")


def imported(args: list[str], cwd: Path, stdin: str | None = None) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "clovercode", *args], cwd=cwd, env=cli_env(),
                          input=stdin, capture_output=True, text=True, timeout=120)
    names = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert names, proc.stderr[-2000:]
    return names


def heavy(names: set[str], allowed: tuple[str, ...] = ()) -> list[str]:
    return sorted(n for n in names if n.split(".")[0] in {h.split(".")[0] for h in HEAVY}
                  and any(n == h or n.startswith(h + ".") for h in HEAVY if h not in allowed))


def test_version_loads_nothing_but_the_package(tmp_path: Path) -> None:
    names = imported(["--version"], tmp_path)
    assert not heavy(names) and "typer" not in names and "rich" not in names


def test_a_headless_run_loads_no_renderer_and_no_model_library(tmp_path: Path) -> None:
    replay = write_replay(tmp_path / "answer.jsonl", "Nothing to change: the code is right.")
    project = tmp_path / "p"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    # The repository map (tree-sitter, numpy) is part of the first prompt; the renderer, the
    # highlighter, the schema validator (no tool was called) and the model libraries are not.
    assert heavy(imported(["exec", "--json", "--model", f"replay:{replay}", "say hi"], project),
                 allowed=("numpy", "tree_sitter")) == []


def test_an_editor_handshake_loads_no_renderer_and_no_validator(tmp_path: Path) -> None:
    replay = write_replay(tmp_path / "answer.jsonl", "hi")
    init = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}\n'
    assert heavy(imported(["acp", "--model", f"replay:{replay}"], tmp_path, stdin=init)) == []


def test_the_editors_first_line_is_answered_with_neither_typer_nor_the_sdk_loaded(tmp_path: Path) -> None:
    # What __main__ loads for `acp` before the first-line reader answers (front/acp/early.py): the
    # SDK's pydantic models (half a second) and the CLI load meanwhile, never before.
    probe = ("import sys, clovercode.front.acp.early as e; e.quick_flags(['--model', 'm']);"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'rich', 'acp', 'pydantic',"
             " 'asyncio') or m == 'clovercode.front.cli'))")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_the_shipped_tool_schemas_are_valid_json_schema() -> None:
    # load_tool_specs() no longer checks them at every start (that imported jsonschema): this does.
    import json

    import jsonschema

    from clovercode.ground.resources import data_dir

    paths = sorted(data_dir("tools").glob("*.json"))
    assert paths
    for path in paths:
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text(encoding="utf-8")))


@pytest.mark.slow
def test_the_startup_bench_measures_each_path_in_real_processes() -> None:
    from clovercode.bench.startup import TARGETS, measure, report

    seconds = measure(1)
    assert set(seconds) == set(TARGETS) and all(len(v) == 1 and 0 < v[0] < 60 for v in seconds.values())
    assert "exec --json, first event" in report(seconds)

"""Commands and tests always see the current source: an edit that keeps a module's size and lands in
the same second as an earlier import must not hide behind bytecode, in the real sandbox and with
--sandbox none; and clovercode leaves no new or stale __pycache__ in the user's tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from clovercode.actions.context import ToolContext
from clovercode.actions.editing import edit_file
from clovercode.actions.files import view_file
from clovercode.ground.config import load_config
from clovercode.executors.local import LocalExecutor
from clovercode.front.fixcmd import run_fix
from clovercode.fixflow.plan import FixRequest

MODULE = "def f():\n    return 1\n"
CHECK = "import m, sys; sys.exit(0 if m.f() == 2 else 1)"


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return json.dumps({"text": f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"})


def replay(path: Path) -> Path:
    """view m.py; import it right after a touch (its pyc records this second); edit it to the same
    size at once; finish. The tests then import it again."""
    turns = [call("view_file", path="m.py"),
             call("run_command", command=f"touch m.py && {sys.executable} -c 'import m; print(m.f())'"),
             call("edit_file", path="m.py", old_text="return 1", new_text="return 2"),
             call("finish", summary="f returns 2 now")]
    path.write_text("\n".join(turns) + "\n")
    return path


def pycaches(root: Path) -> list[Path]:
    return sorted(root.rglob("__pycache__"))


@pytest.mark.parametrize("sandbox", ["workspace-write", "none"])
def test_a_same_second_same_size_edit_is_seen_by_the_tests(tmp_path, monkeypatch, sandbox):
    for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"):  # as most users run: bytecode on
        monkeypatch.delenv(name, raising=False)
    if sandbox != "none" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    model = replay(tmp_path / "edit.replay.jsonl")
    passes, stray = 0, []
    for run in range(20):
        project = tmp_path / f"p{run}"
        project.mkdir()
        (project / "m.py").write_text(MODULE)
        flags = {"model": f"replay:{model}", "sandbox": sandbox, "fix.test_command": f'{sys.executable} -c "{CHECK}"',
                 "fix.test_rounds": 0}
        cfg = load_config(project, os.environ, flags)
        outcome = run_fix(project, cfg, FixRequest(issue_text="f must return 2"), Console(file=open(os.devnull, "w")))
        assert (project / "m.py").read_text() == MODULE.replace("1", "2")
        stray += pycaches(project)  # nothing new may be left in the user's tree
        passes += outcome.tests_passed is True
    assert passes == 20
    assert stray == []


def test_the_users_own_bytecode_never_goes_stale(tmp_path):
    """The user ran their code (their __pycache__ stays); clovercode's edit keeps the size and, as far
    as Python can tell, the second: the user's next run must see the edit all the same."""
    project = tmp_path / "p"
    project.mkdir()
    source = project / "m.py"
    source.write_text(MODULE)
    (project / "other.py").write_text("X = 1\n")
    subprocess.run([sys.executable, "-c", "import m, other"], cwd=project, check=True, env=_plain_env())
    compiled = source.stat().st_mtime
    ctx = ToolContext(project, LocalExecutor())
    view_file(ctx, {"path": "m.py"})
    assert edit_file(ctx, {"path": "m.py", "old_text": "return 1", "new_text": "return 2"}).ok
    os.utime(source, (compiled, compiled))  # the same whole second as the user's compile
    check = subprocess.run([sys.executable, "-c", CHECK], cwd=project, env=_plain_env())
    assert check.returncode == 0
    assert [p.name for p in pycaches(project)] == ["__pycache__"]  # the user's directory stays
    assert any(p.name.startswith("other.") for p in (project / "__pycache__").iterdir())  # untouched


def test_a_command_that_edits_a_module_drops_the_users_stale_bytecode(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    source = project / "m.py"
    source.write_text(MODULE)
    subprocess.run([sys.executable, "-c", "import m"], cwd=project, check=True, env=_plain_env())
    compiled = source.stat().st_mtime
    from clovercode.actions.commands import run_command

    ctx = ToolContext(project, LocalExecutor())
    command = f"sed -i s/1/2/ m.py && touch -d @{int(compiled)} m.py"  # same size, same second
    assert run_command(ctx, {"command": command}).ok
    assert subprocess.run([sys.executable, "-c", CHECK], cwd=project, env=_plain_env()).returncode == 0


def _plain_env() -> dict[str, str]:
    """Python as the user runs it: bytecode read from and written to __pycache__."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}

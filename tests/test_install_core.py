"""A core install (no extras) runs `fix`, `exec` and `map` as declared: the repository map is off with
one clear note, never a crash. The extras are hidden from a real subprocess of the CLI by a
``sitecustomize`` whose import finder refuses them (as an install without them would); the real
venvs per extra are built in tests/test_install_venvs.py (slow)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import EXAMPLES, cli_env, git, run_cli

REPLAY = f"replay:{EXAMPLES / 'calc.replay.jsonl'}"
TASK = "mean([1, 2, 3, 4]) returns 2 but should return 2.5"
CONTEXT_EXTRA = ("numpy", "tree_sitter", "tree_sitter_language_pack")
NOTE = "repository map off: install clovercode[context]"

HIDER = '''
import sys

HIDDEN = {hidden!r}


class _Hide:
    """Imports of the hidden top-level modules fail as if they were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Hide())
'''


def without(tmp_path: Path, *modules: str) -> dict[str, str]:
    """cli_env() for a Python where ``modules`` are not installed."""
    site = tmp_path / "hide-modules"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDER.format(hidden=set(modules)))
    env = cli_env()
    env["PYTHONPATH"] = f"{env['PYTHONPATH']}:{site}"
    return env


def test_the_hider_hides(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "import numpy"], env=without(tmp_path, "numpy"),
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "No module named 'numpy'" in proc.stderr


def test_fix_without_the_context_extra_fixes_and_says_the_map_is_off(calc_repo, tmp_path):
    proc = run_cli("fix", TASK, "--model", REPLAY, "--sandbox", "none", cwd=calc_repo,
                   env=without(tmp_path, *CONTEXT_EXTRA))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "internal error" not in out
    assert out.count(NOTE) == 1
    assert "Result: fixed" in out
    assert "a / len" in git(calc_repo, "show", "HEAD") or "/ len(" in git(calc_repo, "show", "HEAD")


def test_exec_json_without_numpy_reports_the_note_as_a_warning_event(calc_repo, tmp_path):
    proc = run_cli("exec", "--json", "--model", REPLAY, "--sandbox", "none", "explain calc.py",
                   cwd=calc_repo, env=without(tmp_path, "numpy"))
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    notes = [e["text"] for e in events if e["type"] == "warning" and "repository map" in e["text"]]
    assert proc.returncode == 0, proc.stderr
    assert notes == [f"{NOTE} (missing: numpy)"]
    assert "Traceback" not in proc.stderr


def test_map_without_the_context_extra_is_a_usage_error(calc_repo, tmp_path):
    proc = run_cli("map", cwd=calc_repo, env=without(tmp_path, *CONTEXT_EXTRA))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "pip install 'clovercode[context]'" in proc.stderr

"""The whole path once: CLI subprocess → replay backend → loop → tools → a real git repo."""

import json

from conftest import EXAMPLES, run_cli


def test_fix_replay_end_to_end(calc_repo):
    proc = run_cli("fix", "mean() is wrong", "--repo", str(calc_repo), "--sandbox", "none",
                   "--model", f"replay:{EXAMPLES / 'calc.replay.jsonl'}", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "fixed"
    assert result["changed_files"] == ["calc.py"]
    assert "sum(values) / len(values)" in (calc_repo / "calc.py").read_text()

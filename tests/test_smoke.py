"""The whole path once: CLI subprocess → replay backend → loop → tools → a real git repo,
with commands in the default sandbox (bubblewrap, workspace-write)."""

import json

from conftest import EXAMPLES, run_cli


def test_fix_replay_end_to_end(calc_repo):
    proc = run_cli("fix", "mean() is wrong", "--repo", str(calc_repo),
                   "--model", f"replay:{EXAMPLES / 'calc.replay.jsonl'}", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "fixed"
    assert result["changed_files"] == ["calc.py"]
    assert "sum(values) / len(values)" in (calc_repo / "calc.py").read_text()
    events = [json.loads(line) for line in open(result["trajectory"], encoding="utf-8")]
    start = next(e for e in events if e["kind"] == "run_start")
    assert start["executor"] == "workspace-write"
    ran = [e for e in events if e["kind"] == "observation" and e.get("name") == "run_command"]
    assert ran and ran[0]["ok"], ran

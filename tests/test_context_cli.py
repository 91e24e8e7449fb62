"""The context commands through the real CLI in a subprocess: map, init, --resume, /compact, /context."""

import json
import re
import sys
from pathlib import Path

import pexpect
from conftest import EXAMPLES, cli_env, run_cli
from golden_map import sample_git_repo

from clovercode.front.contextcmd import resume_argv


def test_map_prints_a_focused_map_within_the_budget(tmp_path):
    root = sample_git_repo(tmp_path / "sample")
    proc = run_cli("map", str(root), "--tokens", "120", "--focus", "app/report.py", "--stats")
    assert proc.returncode == 0, proc.stderr
    files = [line.rstrip(":") for line in proc.stdout.splitlines() if not line.startswith(" ")]
    assert files[0] in {"app/util.py", "app/models.py", "app/report.py", "app/main.py"}
    assert "focus: app/report.py" in proc.stderr and "/120 tokens" in proc.stderr
    assert "from cache" in proc.stderr
    second = run_cli("map", str(root), "--tokens", "120", "--focus", "app/report.py", "--stats")
    assert second.stdout == proc.stdout and "0 parsed" in second.stderr  # the cache answered


def test_map_with_symbol_focus_and_comma_lists(tmp_path):
    root = sample_git_repo(tmp_path / "sample")
    proc = run_cli("map", "--tokens", "60", "--focus", "fetchUsers,ApiUser", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("web/")


def test_map_errors_are_usage_errors(tmp_path):
    root = sample_git_repo(tmp_path / "sample")
    bad_focus = run_cli("map", str(root), "--focus", "does_not_exist_anywhere")
    assert bad_focus.returncode == 2 and "neither a file" in bad_focus.stderr and "Traceback" not in bad_focus.stderr
    assert run_cli("map", str(root), "--tokens", "0").returncode == 2
    missing = run_cli("map", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "not found" in missing.stderr


def test_map_of_an_ignored_tree_says_why_it_is_empty(tmp_path):
    root = sample_git_repo(tmp_path / "sample")
    (root / ".gitignore").write_text("ignored/\n")
    (root / "ignored").mkdir()
    (root / "ignored" / "x.py").write_text("def hidden():\n    pass\n")
    proc = run_cli("map", str(root / "ignored"))
    assert proc.returncode == 0 and proc.stdout == ""
    assert ".gitignore" in proc.stderr


def test_init_writes_a_starter_and_keeps_an_existing_one(tmp_path):
    root = sample_git_repo(tmp_path / "sample")
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    proc = run_cli("init", "-C", str(root))
    assert proc.returncode == 0, proc.stderr
    text = (root / "AGENTS.md").read_text()
    assert text.startswith("# AGENTS.md") and "`python -m pytest -q`" in text and "Python (" in text
    (root / "AGENTS.md").write_text("mine\n")
    again = run_cli("init", "-C", str(root))
    assert again.returncode == 2 and "already exists" in again.stderr
    assert (root / "AGENTS.md").read_text() == "mine\n"
    assert run_cli("init", "-C", str(root), "--force").returncode == 0
    assert (root / "AGENTS.md").read_text() != "mine\n"


def test_resume_argv_lets_the_id_be_omitted():
    assert resume_argv(["--resume"]) == ["--resume=@latest"]
    assert resume_argv(["--resume", "--model", "x"]) == ["--resume=@latest", "--model", "x"]
    assert resume_argv(["--resume", "20260101-abc"]) == ["--resume", "20260101-abc"]
    assert resume_argv(["fix", "--", "--resume"]) == ["fix", "--", "--resume"]


def snapshot(path: Path) -> dict:
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in events if e["kind"] == "conversation"][-1]


def trajectories(home: Path) -> list[Path]:
    return sorted((home / ".local" / "state" / "clovercode" / "trajectories").glob("*.jsonl"))


def test_resume_continues_the_saved_conversation(calc_repo, tmp_path, isolated_home):
    fixed = run_cli("fix", "mean() is wrong", "-C", str(calc_repo), "--sandbox", "none",
                    "--model", f"replay:{EXAMPLES / 'calc.replay.jsonl'}")
    assert fixed.returncode == 0, fixed.stderr
    (first,) = trajectories(isolated_home)
    saved = snapshot(first)
    assert saved["root"] == str(calc_repo) and saved["messages"][0]["content"].startswith("mean() is wrong")

    answer = tmp_path / "answer.jsonl"
    answer.write_text(json.dumps({"text": "I changed mean() to use true division."}) + "\n")
    proc = run_cli("--resume", "-C", str(calc_repo), "--sandbox", "none", "--model", f"replay:{answer}",
                   input="what did you change?\n/exit\n")
    assert proc.returncode == 0, proc.stderr
    assert f"resumed {first.stem}" in proc.stdout and "last task: mean() is wrong" in proc.stdout
    assert re.search(r"context \d+%: [\d.k]+/[\d.k]+ tokens", proc.stdout)  # the fullness line after the task
    newest = trajectories(isolated_home)[-1]
    contents = [m["content"] for m in snapshot(newest)["messages"]]
    assert contents[0].startswith("mean() is wrong") and "what did you change?" in contents
    assert len(contents) == len(saved["messages"]) + 2

    by_id = run_cli("--resume", first.stem[-6:], "-C", str(calc_repo), "--sandbox", "none",
                    "--model", f"replay:{answer}", input="/exit\n")
    assert by_id.returncode == 0 and f"resumed {first.stem}" in by_id.stdout
    unknown = run_cli("--resume", "no-such-session", "-C", str(calc_repo), "--sandbox", "none",
                      "--model", f"replay:{answer}", input="/exit\n")
    assert unknown.returncode == 2 and "no saved session matches" in unknown.stderr
    assert first.stem in unknown.stderr  # the hint lists what can be resumed


def test_resume_without_sessions_says_so(calc_repo):
    proc = run_cli("--resume", "-C", str(calc_repo), "--sandbox", "none",
                   "--model", f"replay:{EXAMPLES / 'calc.replay.jsonl'}", input="/exit\n")
    assert proc.returncode == 2 and "no saved session for" in proc.stderr


def test_repl_compact_and_context_in_a_real_terminal(calc_repo, tmp_path):
    fixed = run_cli("fix", "mean() is wrong", "-C", str(calc_repo), "--sandbox", "none",
                    "--model", f"replay:{EXAMPLES / 'calc.replay.jsonl'}")
    assert fixed.returncode == 0, fixed.stderr
    child = pexpect.spawn(sys.executable, ["-m", "clovercode", "--resume", "-C", str(calc_repo), "--sandbox", "none",
                                     "--model", f"replay:{EXAMPLES / 'calc.replay.jsonl'}"],
                          env=cli_env(TERM="dumb", COLUMNS="200"), encoding="utf-8", timeout=60,
                          dimensions=(40, 200))
    try:
        child.expect_exact("Resume which?")  # in a terminal a bare --resume offers the picker
        child.sendline("")  # Enter: the newest
        child.expect("resumed ")
        child.expect("clover> ")
        child.sendline("/context")
        child.expect(r"context \d+%: [\d.k]+/[\d.k]+ tokens")
        child.expect("clover> ")
        child.sendline("/compact")
        child.expect(r"compacted the history: (\d+) → (\d+) tokens")
        before, after = int(child.match.group(1)), int(child.match.group(2))
        assert after < before
        child.expect("clover> ")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)

"""Any locale: where the output's encoding lacks a character (PYTHONIOENCODING=latin-1, a Latin-1
locale) clovercode's marks fall back to ASCII and other characters to "?", never a traceback; JSON
output is ASCII, so it is the same valid JSON in every locale. The REPL on a real pty, exec and
exec --json as real processes."""

from __future__ import annotations

import json
import sys

import pexpect
import pyte

from clovercode.ui.glyphs import fit
from conftest import cli_env, default_sigint, write_replay
from test_parser_table import xml

ANSWER = "Done — mean() now divides ✓ (日本)."


def test_fit_keeps_what_the_encoding_has_and_replaces_the_rest():
    assert fit(ANSWER, "utf-8") is ANSWER
    assert fit(ANSWER, "latin-1") == "Done -- mean() now divides + (??)."
    assert fit("café · ⠋ →", "ascii") == "caf? - ? ->"


def run_latin_1(*args: str, cwd, env):
    import subprocess

    return subprocess.run([sys.executable, "-m", "clovercode", *args], cwd=cwd, env=env, capture_output=True,
                          encoding="latin-1", timeout=120)


def test_exec_and_exec_json_under_latin_1(calc_repo, tmp_path):
    model = write_replay(tmp_path / "r.jsonl", xml("view_file", path="calc.py"), ANSWER)
    env = cli_env(PYTHONIOENCODING="latin-1")
    plain = run_latin_1("exec", "--model", f"replay:{model}", "explain", cwd=calc_repo, env=env)
    assert plain.returncode == 0, plain.stderr
    # the answer is data in a pipe: what the encoding lacks is "?", nothing swapped for look-alikes
    assert plain.stdout == "Done ? mean() now divides ? (??).\n" and "Traceback" not in plain.stderr
    assert "-> view_file" in plain.stderr  # the progress log on stderr, marks in ASCII
    model = write_replay(tmp_path / "r2.jsonl", xml("view_file", path="calc.py"), ANSWER)
    as_json = run_latin_1("exec", "--json", "--model", f"replay:{model}", "explain ✓", cwd=calc_repo, env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert as_json.stdout.isascii()
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [e["text"] for e in events if e["type"] == "model_text"][-1] == ANSWER
    assert events[0]["task"] == "explain ✓" and events[-1]["answer"] == ANSWER


def test_the_repl_on_a_latin_1_terminal_draws_the_turn_with_ascii_marks(calc_repo, tmp_path):
    model = write_replay(tmp_path / "r.jsonl", xml("view_file", path="calc.py"), ANSWER)
    env = cli_env(PYTHONIOENCODING="latin-1", PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm", COLUMNS="100", LINES="40")
    child = pexpect.spawn(sys.executable, ["-m", "clovercode", "--model", f"replay:{model}", "--sandbox", "none"],
                          cwd=str(calc_repo), env=env, encoding="latin-1", timeout=60, dimensions=(40, 100),
                          preexec_fn=default_sigint)
    out = []
    child.logfile_read = type("Sink", (), {"write": lambda self, text: out.append(text), "flush": lambda self: None})()
    child.expect_exact("clover>")
    child.sendline("explain calc.py")
    child.expect_exact("mean() now divides")
    child.expect_exact("clover>")
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    screen = pyte.HistoryScreen(100, 40, history=10000)
    pyte.Stream(screen).feed("".join(out))
    text = "\n".join("".join(line[x].data for x in range(100)).rstrip() for line in screen.history.top) + \
        "\n".join(line.rstrip() for line in screen.display)
    assert child.exitstatus == 0 and "Traceback" not in text
    assert "-> view_file path='calc.py'" in text and "  + calc.py (lines 1-13 of 13)" in text
    assert "Done -- mean() now divides + (??)." in text

"""What a person sees in the REPL, read off an emulated screen (pyte) fed by a real pty: each event
shown once, answers as Markdown, cut observations expanded with /show, the whole run in /transcript."""

from __future__ import annotations

import json

import pexpect

from pty_screen import PROMPT, screen_text, spawn_repl, wait_screen
from test_parser_table import xml

ANSWER = "**Done.** The fix:\n\n```python\nreturn sum(values) / len(values)\n```\n\n- one line changed"


def test_each_event_once_markdown_and_full_output_on_demand(calc_repo, tmp_path):
    replay = tmp_path / "r.jsonl"
    turns = [xml("view_file", path="calc.py"),
             xml("no_such_tool", path="calc.py"),
             xml("edit_file", path="calc.py", old_text="    return sum(values) // len(values)",
                 new_text="    return sum(values) / len(values)"),
             ANSWER]
    replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    child = spawn_repl(calc_repo, "--model", f"replay:{replay}", "--approval", "suggest", "--max-steps", "9")
    child.expect_exact(PROMPT)
    child.sendline("fix mean")
    child.expect_exact("Apply this change?")
    child.sendline("y")
    child.expect_exact("stopped: the model answered")
    child.expect_exact(PROMPT)
    before = screen_text(child)
    child.sendline("/show 1")
    child.expect_exact("Difference between the largest")
    child.expect_exact(PROMPT)
    child.sendline("/transcript")
    child.expect_exact("no_such_tool")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)

    assert "step 1/9" in before  # the REPL takes --max-steps
    raw = child.logfile_read.getvalue()
    assert "step 1/9 · 0s · " in raw and "Ctrl-C interrupts" in raw  # the live status line was drawn…
    assert "Ctrl-C interrupts" not in before  # …and erased: it is not part of the record
    assert before.count("+    return sum(values) / len(values)") == 1  # the approved diff, not again after it
    assert before.count("no_such_tool") == 1  # ✗ once, no ⚠ echo of the same error
    assert before.count("Done.") == 1 and "**Done.**" not in before and "```" not in before  # Markdown, once
    assert "• one line changed" in before
    assert "Difference between the largest" not in before and "/show 1 shows all" in before
    after = screen_text(child)
    assert after.count("Difference between the largest") == 2  # /show 1, then /transcript


def test_at_file_attaches_and_bang_runs_in_the_sandbox(calc_repo, tmp_path):
    import os
    from pathlib import Path

    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": "Seen it."}) + "\n")
    child = spawn_repl(calc_repo, "--model", f"replay:{replay}", "--approval", "suggest")
    child.expect_exact(PROMPT)
    child.sendline("!echo escaped > ../outside.txt; echo made > inside.txt; echo ran-it")
    child.expect_exact("the output is in the conversation")  # the command ended: keys go to the prompt now
    child.expect_exact(PROMPT)
    child.send("explain @cal")
    child.send("\t")  # the menu opens: calc.py, then test_calc.py (only git's files)
    child.expect_exact("test_calc.py")
    child.send("\t")  # picks the first
    wait_screen(child, "explain @calc.py")
    child.send(" please\r")
    child.expect_exact("attached calc.py (13 lines")
    child.expect_exact("Seen it.")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    assert (calc_repo / "inside.txt").read_text() == "made\n"
    assert not (tmp_path / "outside.txt").exists()  # outside the project: the sandbox kept it from the host
    [trajectory] = (Path(os.environ["XDG_STATE_HOME"]) / "clovercode" / "trajectories").glob("*.jsonl")
    events = [json.loads(line) for line in trajectory.read_text().splitlines()]
    task = events[0]["task"]
    assert task.startswith("explain @calc.py please\n\n<attached path=\"calc.py\" lines=\"13\">")
    assert "def spread(values):" in task
    snapshot = next(e for e in events if e["kind"] == "conversation")
    assert "I ran `echo escaped > ../outside.txt" in snapshot["messages"][0]["content"]


def test_file_completion_follows_gitignore(calc_repo):
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    from clovercode.front.repl.completion import FileLister, ReplCompleter

    (calc_repo / ".gitignore").write_text("notes.secret\n")
    (calc_repo / "notes.secret").write_text("x")
    (calc_repo / "notes.md").write_text("x")
    completer = ReplCompleter(lambda: ["help", "show"], FileLister(calc_repo))
    words = lambda text: [c.text for c in completer.get_completions(Document(text), CompleteEvent())]  # noqa: E731
    assert words("look at @notes") == ["@notes.md"]
    assert words("@calc") == ["@calc.py", "@test_calc.py"]
    assert words("/sh") == ["/show"]


def test_an_allow_rule_persists_across_sessions_and_esc_cancels_the_run(calc_repo, tmp_path):
    import os
    from pathlib import Path

    config = Path(os.environ["XDG_CONFIG_HOME"]) / "clovercode" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("# my settings\nmax_steps = 12\n")
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("".join(json.dumps({"text": t}) + "\n" for t in [xml("run_command", command="git status --short"),
                                                                       "Done one."]))
    second.write_text("".join(json.dumps({"text": t}) + "\n" for t in [
        xml("run_command", command="git status"), "Done two.", xml("run_command", command="touch cancelled.txt"), "never"]))

    child = spawn_repl(calc_repo, "--model", f"replay:{first}", "--approval", "suggest")
    child.expect_exact(PROMPT)
    child.sendline("status please")
    child.expect_exact("[a]lways allow commands starting `git status`")
    child.sendline("a")
    child.expect_exact("Done one.")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    assert config.read_text().startswith("# my settings\nmax_steps = 12\n")  # the person's file kept as written
    assert 'allow = ["git status *"]' in config.read_text()

    child = spawn_repl(calc_repo, "--model", f"replay:{second}", "--approval", "suggest")
    child.expect_exact(PROMPT)
    child.sendline("status again")
    child.expect_exact("Done two.")
    child.expect_exact(PROMPT)
    child.sendline("touch something")
    child.expect_exact("Run it?")
    child.send("\x1b")  # Esc at the approval prompt: the run stops, not just this command
    child.expect_exact("stopped: cancelled by the user at an approval prompt")
    child.expect_exact(PROMPT)
    child.sendline("/permissions")
    child.expect_exact("1. git status")
    child.expect_exact(PROMPT)
    child.sendline("/permissions remove 1")
    child.expect_exact("removed the rule")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    screen = screen_text(child)
    assert screen.count("Run it?") == 1  # `git status` was not asked about in the second session
    assert "never" not in screen and not (calc_repo / "cancelled.txt").exists()
    assert "git status" not in config.read_text() and "max_steps = 12" in config.read_text()


def test_sessions_list_picker_and_other_projects(calc_repo, tmp_path):
    import time

    from conftest import run_cli

    other = tmp_path / "other"
    other.mkdir()
    replay = tmp_path / "answer.jsonl"
    replay.write_text(json.dumps({"text": "Answered it."}) + "\n")
    for cwd, task in ((other, "alpha task elsewhere"), (calc_repo, "beta task here"), (calc_repo, "gamma task here")):
        done = run_cli("exec", "--model", f"replay:{replay}", task, cwd=cwd)
        assert done.returncode == 0, done.stderr
        time.sleep(0.05)  # distinct modification times: newest first is well defined
    listing = run_cli("sessions", cwd=calc_repo)
    assert listing.returncode == 0, listing.stderr
    assert "alpha" not in listing.stdout
    assert listing.stdout.index("gamma task here") < listing.stdout.index("beta task here")
    ids = {line.split()[0]: line for line in listing.stdout.splitlines() if "task here" in line}
    beta = next(i for i, line in ids.items() if "beta" in line)
    alpha = next(line.split()[0] for line in run_cli("sessions", "--all", cwd=calc_repo).stdout.splitlines()
                 if "alpha" in line)

    refused = run_cli("--resume", alpha, "--model", f"replay:{replay}", cwd=calc_repo, input="/exit\n")
    assert refused.returncode == 2 and "belongs to another project" in refused.stderr and "--any-project" in refused.stderr
    allowed = run_cli("--resume", alpha, "--any-project", "--model", f"replay:{replay}", cwd=calc_repo, input="/exit\n")
    assert allowed.returncode == 0 and f"resumed {alpha}" in allowed.stdout

    child = spawn_repl(calc_repo, "--resume", "--model", f"replay:{replay}", "--sandbox", "none")
    child.expect_exact("Resume which?")
    picker = screen_text(child)
    assert "gamma task here" in picker and "beta task here" in picker and "alpha" not in picker
    child.sendline("2")
    child.expect_exact(f"resumed {beta}")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    screen = screen_text(child)
    assert "› beta task here" in screen and "  Answered it." in screen  # the last exchange, shown on resuming
    assert screen.rstrip().endswith(f"continue this session with: clovercode --resume {beta}")


def test_custom_commands_diff_status_init_and_sessions(calc_repo, tmp_path):
    import os
    from pathlib import Path

    (calc_repo / ".clovercode" / "commands").mkdir(parents=True)
    (calc_repo / ".clovercode" / "commands" / "review.md").write_text(
        "---\ndescription: Review a file for bugs\n---\nReview $ARGUMENTS for bugs and fix them.\n")
    (calc_repo / ".clovercode" / "commands" / "exit.md").write_text("A project cannot replace /exit.\n")
    user_commands = Path(os.environ["XDG_CONFIG_HOME"]) / "clovercode" / "commands"
    user_commands.mkdir(parents=True)
    (user_commands / "explain.md").write_text("Explain the code in plain words.\n")
    replay = tmp_path / "r.jsonl"
    turns = [xml("view_file", path="calc.py"),
             xml("edit_file", path="calc.py", old_text="    return sum(values) // len(values)",
                 new_text="    return sum(values) / len(values)"),
             "Reviewed and fixed."]
    replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    child = spawn_repl(calc_repo, "--model", f"replay:{replay}", "--approval", "full-auto")
    child.expect_exact(PROMPT)
    child.sendline("/help")
    child.expect_exact("custom commands:")
    child.expect_exact(PROMPT)
    child.sendline("/diff")
    child.expect_exact("no changes in this session yet")
    child.expect_exact(PROMPT)
    child.sendline("/review calc.py")
    child.expect_exact("Reviewed and fixed.")
    child.expect_exact(PROMPT)
    child.sendline("/diff")
    child.expect_exact("+    return sum(values) / len(values)")
    child.expect_exact(PROMPT)
    child.sendline("/status")
    child.expect_exact("1 task · 3 steps")
    child.expect_exact(PROMPT)
    child.sendline("/sessions")
    child.expect_exact("continue one with")
    child.expect_exact(PROMPT)
    child.sendline("/init")
    child.expect_exact("wrote ")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    screen = screen_text(child)
    assert "/review  " in screen and "Review a file for bugs (project:" in screen
    assert "/explain" in screen and "Explain the code in plain words. (user:" in screen
    assert "A project cannot replace" not in screen
    assert "-    return sum(values) // len(values)" in screen.split("Reviewed and fixed.")[1]  # the /diff after the task
    assert "Review calc.py for bugs" in screen.split("clover> /sessions")[1]  # the session, listed by its first task
    assert (calc_repo / "AGENTS.md").is_file()
    [trajectory] = (Path(os.environ["XDG_STATE_HOME"]) / "clovercode" / "trajectories").glob("*.jsonl")
    assert json.loads(trajectory.read_text().splitlines()[0])["task"] == "Review calc.py for bugs and fix them."

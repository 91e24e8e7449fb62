"""Plan mode and one-key answers on a real pty (pyte): Shift+Tab cycles the mode shown on the prompt
line, a planning turn only reads (a write is refused) and draws the plan as a checklist, the plan is
approved with one key and the work runs in the chosen mode; a command is approved with `y` alone."""

from __future__ import annotations

import json
import shutil

import pexpect

from pty_screen import PROMPT, screen_text, spawn_repl, wait_screen
from test_parser_table import xml

SANDBOX = () if shutil.which("bwrap") else ("--sandbox", "none")
PLAN = json.dumps([{"step": "Write notes.txt", "status": "pending"}, {"step": "Say hello", "status": "pending"}])


def test_shift_tab_to_plan_mode_a_read_only_turn_a_checklist_one_key_approvals_and_slash_plan(calc_repo, tmp_path):
    turns = [xml("update_plan", plan=PLAN), xml("write_file", path="notes.txt", content="too early"),
             "My plan: write notes.txt, then say hello.",
             xml("write_file", path="notes.txt", content="planned"), xml("run_command", command="echo one-key-ok"),
             "Done."]
    model = tmp_path / "r.jsonl"
    model.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    child = spawn_repl(calc_repo, "--model", f"replay:{model}", "--approval", "suggest", *SANDBOX)
    try:
        child.expect_exact(PROMPT)
        wait_screen(child, "ask before acting · shift+tab")
        child.send("\x1b[Z")  # Shift+Tab
        wait_screen(child, "auto-edit: edits applied · shift+tab")
        child.send("\x1b[Z")
        wait_screen(child, "plan mode: read only · shift+tab")
        child.send("plan the notes\r")
        child.expect_exact("Carry out this plan?")
        assert not (calc_repo / "notes.txt").exists()
        screen = screen_text(child)
        assert "Plan (0/2 done)" in screen and "○ Write notes.txt" in screen and "○ Say hello" in screen
        assert "Plan mode: nothing may change yet" in screen
        child.send("a")  # one key: yes, in auto-edit
        child.expect_exact("plan approved")
        child.expect_exact("Run it?")  # auto-edit: the edit was applied, the command is asked about
        assert (calc_repo / "notes.txt").read_text() == "planned"
        child.send("y")  # one key, no Enter
        child.expect_exact("one-key-ok")
        child.expect_exact("Done.")
        child.expect_exact(PROMPT)
        wait_screen(child, "auto-edit: edits applied · shift+tab")
        child.sendline("/plan")
        child.expect_exact("only reading tools run until you approve a plan")
        wait_screen(child, "plan mode: read only · shift+tab")
        child.send("\x03")  # Ctrl-C at an empty prompt says how to leave; a second one leaves
        child.expect_exact("(Ctrl-C again or Ctrl-D exits)")
        child.send("\x03")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_clovercode_task_and_continue_on_a_real_terminal(calc_repo, tmp_path):
    model = tmp_path / "one.jsonl"
    model.write_text(json.dumps({"text": "Hello from the first session."}) + "\n")
    child = spawn_repl(calc_repo, "--model", f"replay:{model}", "say hello")
    try:
        child.expect_exact("Hello from the first session.")  # sent before the prompt ever showed
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
        assert f"{PROMPT} say hello" in screen_text(child)
    finally:
        child.close(force=True)
    child = spawn_repl(calc_repo, "--model", f"replay:{model}", "-c")
    try:
        child.expect_exact("last task: say hello")  # the newest session, no picker
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)

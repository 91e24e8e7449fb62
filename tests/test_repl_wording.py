"""Wording and small habits: /cost counts what the session used, a change's head has no dangling
colon, exec tells the model nobody was asked, plurals agree, Esc is named as Esc."""

from __future__ import annotations

import io

from rich.console import Console

from clovercode.front.repl.cost import CostMeter
from clovercode.ui.render import ConsoleRenderer, Screen


def test_cost_splits_tokens_and_time_between_the_model_and_the_tools():
    meter = CostMeter()
    meter.emit("model_turn", usage={"prompt_tokens": 100, "completion_tokens": 20}, seconds=1.5)
    meter.emit("observation", seconds=0.25)
    meter.emit("model_turn", usage={"prompt_tokens": 130, "completion_tokens": 5}, seconds=0.5)
    assert meter.lines() == ["tokens: 230 in · 25 out (2 model turns)", "time: 2.2 s · model 2.0 s · tools 0.2 s (1 call)"]


def test_a_change_has_no_dangling_colon_and_esc_is_named_esc():
    out = io.StringIO()

    class Keys:
        fired = True

    renderer = ConsoleRenderer(Console(file=out, width=100), screen=Screen(keys=Keys()))
    diff = "--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-a\n+b"
    renderer.emit("observation", name="edit_file", ok=True, text=f"Changed calc.py (+1 -1):\n{diff}", data={"diff": diff})
    renderer.emit("run_end", stop_reason="interrupted", steps=1, detail="interrupted by the user (Ctrl-C)")
    lines = out.getvalue().splitlines()
    assert lines[0] == "  ✓ Changed calc.py (+1 -1)" and "■ stopped: interrupted by the user (Esc)" in out.getvalue()


def test_exec_tells_the_model_it_is_headless_not_that_someone_declined(tmp_path):
    import json

    from clovercode.ground.config import load_config
    from clovercode.front.execcmd import run_exec
    from conftest import write_replay
    from test_parser_table import xml

    model = write_replay(tmp_path / "r.jsonl", xml("write_file", path="x.txt", content="x"), "ok")
    out = io.StringIO()
    cfg = load_config(tmp_path, flags={"model": f"replay:{model}", "sandbox": "none", "approval": "suggest"})
    assert run_exec(tmp_path, cfg, "write", True, out, Console(file=io.StringIO())) == 0
    [observation] = [e for e in map(json.loads, out.getvalue().splitlines()) if e["type"] == "observation"]
    assert observation["text"].startswith("Error: Not done: this run is headless (clovercode exec) and --approval suggest")
    assert "declined" not in observation["text"] and not (tmp_path / "x.txt").exists()


def test_a_declined_call_speaks_to_the_person_and_long_lines_wrap_at_words():
    # "✗ Error: The user declined" spoke of the person in the third person; on a terminal, rich wraps an
    # observation at words (the terminal's own wrap split "read|ing" mid-word)
    out = io.StringIO()
    renderer = ConsoleRenderer(Console(file=out, width=40, force_terminal=True, color_system=None), screen=Screen())
    renderer.emit("observation", name="run_command", ok=False, text="Error: The user declined to run this command.",
                  data={})
    words = "reading " * 12
    renderer.emit("observation", name="run_command", ok=True, text=f"first line\n{words}", data={})
    shown = out.getvalue()
    assert "✗ You declined to run this command." in shown and "Error" not in shown
    for line in shown.splitlines():  # no longer than the terminal (it would break it anywhere), cut at spaces
        assert len(line) <= 40, line
        assert all(word in ("✗", "✓", "You", "declined", "to", "run", "this", "command.", "first", "line", "reading")
                   for word in line.split()), line

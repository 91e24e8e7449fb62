"""The REPL's parts without a terminal: @path attachments and their budget, custom command files,
the transcript behind /show."""

from __future__ import annotations


from rich.console import Console

from clovercode.actions.guards import FileStamps
from clovercode.front.repl.attach import expand_mentions
from clovercode.front.repl.custom import load_custom_commands
from clovercode.front.repl.transcript import Transcript, show_command


def test_mentions_attach_cut_to_the_budget_and_refuse_what_is_not_a_project_file(tmp_path):
    (tmp_path / "small.py").write_text("x = 1\n")
    (tmp_path / "big.txt").write_text("".join(f"line {n} of a long file\n" for n in range(2000)))
    stamps = FileStamps()
    out = expand_mentions("look at @small.py, @big.txt and @missing.py or @../x", tmp_path, 500, stamps)
    assert [(a.shown, a.lines) for a in out.attached] == [("small.py", 1), ("big.txt", 2000)]
    big = out.attached[1]
    assert 0 < big.kept < 2000 and sum(a.tokens for a in out.attached) <= 500
    assert f"[cut: lines 1-{big.kept} of 2000 attached" in out.text and f"start_line={big.kept + 1}" in out.text
    assert '<attached path="small.py" lines="1">\nx = 1\n</attached>' in out.text
    assert (tmp_path / "small.py").resolve() in stamps.seen and (tmp_path / "big.txt").resolve() not in stamps.seen
    problems = "\n".join(out.problems)
    assert "@missing.py" in problems and "@../x" in problems and "outside the project" in problems
    assert expand_mentions("mail me at a@b.example", tmp_path, 500).text == "mail me at a@b.example"


def test_custom_commands_from_both_places(tmp_path):
    project, config = tmp_path / "proj", tmp_path / "config"
    (project / ".clovercode" / "commands").mkdir(parents=True)
    (config / "clovercode" / "commands").mkdir(parents=True)
    (project / ".clovercode" / "commands" / "fixit.md").write_text("---\ndescription: Fix it\n---\nFix $ARGUMENTS now.\n")
    (config / "clovercode" / "commands" / "fixit.md").write_text("the user's version\n")
    (config / "clovercode" / "commands" / "plain.md").write_text("Explain the design.\n")
    (config / "clovercode" / "commands" / "help.md").write_text("cannot shadow a built-in\n")
    found = load_custom_commands(project, {"XDG_CONFIG_HOME": str(config)}, {"help"})
    assert sorted(found) == ["fixit", "plain"]
    assert found["fixit"].source == "project" and found["fixit"].description == "Fix it"
    assert found["fixit"].task("calc.py") == "Fix calc.py now."
    assert found["plain"].task("the loop") == "Explain the design.\n\nthe loop"


def test_show_numbers_observations_in_order(tmp_path):
    transcript = Transcript()
    for n in (1, 2):
        transcript.emit("observation", id=str(n), name="run_command", ok=True, text=f"output {n}\n" + "x\n" * 20, data={})
    console = Console(record=True, width=80)
    show_command(console, transcript, "")
    show_command(console, transcript, "1")
    show_command(console, transcript, "7")
    text = console.export_text()
    assert text.index("#2") < text.index("output 2") < text.index("#1") < text.index("output 1")
    assert "from 1 to 2" in text


def test_context_after_the_tree_changed_between_tasks_does_not_crash(calc_repo, tmp_path):
    """The repo map refresher kept the finished task's (closed) trajectory as its sink: /context
    after a file appeared between tasks crashed the REPL; so did fix's feedback rounds."""
    import json

    from conftest import run_cli

    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": "Fine."}) + "\n")
    proc = run_cli("--model", f"replay:{replay}", "--sandbox", "none", cwd=calc_repo,
                   input='look\n!echo "def g(): pass" > extra.py\n/context\n/exit\n')
    assert proc.returncode == 0 and "internal error" not in proc.stderr + proc.stdout, proc.stdout + proc.stderr
    assert "map " in proc.stdout.split("the next task can refer to it")[1]  # the /context line, with the map

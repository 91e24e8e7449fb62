"""Files clovercode reads for the model must lie inside the project (issue 24, "secrets through
symlinks"): a repository, or a sandboxed command steered by an injection, can name a secret of the
user's as AGENTS.md or as a custom command. Each test plants a fake key in the test's own HOME and
checks what reaches the model server (a real HTTP server on 127.0.0.1), the screen and the
trajectory files. docs/security.md, "Trust: what clovercode reads and what it commits"."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import make_git_repo, run_cli
from conftest import tool_call_text as call
from openai_stub import StubServer, chunk, sse

from clovercode.context.instructions import read_instructions
from clovercode.front.repl.attach import expand_mentions
from clovercode.front.repl.custom import load_custom_commands
from clovercode.trust.paths import inside_project

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- fake-key-3f9a1c"
HAS_BWRAP = shutil.which("bwrap") is not None


@pytest.fixture
def secret(isolated_home) -> Path:
    key = isolated_home / ".ssh" / "id_rsa"
    key.parent.mkdir(mode=0o700)
    key.write_text(SECRET + "\n")
    return key



def reply(text: str):
    return sse([chunk({"content": text}, "stop")])


def everything_recorded(stub: StubServer, proc, home: Path) -> str:
    """What the model server received, what was printed, and every state file clovercode wrote."""
    states = [p.read_text(errors="replace") for p in (home / ".local" / "state").rglob("*") if p.is_file()]
    return "\n".join([json.dumps(stub.posts), proc.stdout, proc.stderr, *states])


def test_one_rule_follows_symlinks_and_dotdot(tmp_path, secret):
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "ok.py").write_text("x = 1\n")
    (root / "key").symlink_to(secret)
    (root / "home").symlink_to(secret.parent.parent)
    (root / "inner").symlink_to("src/ok.py")
    assert inside_project(root, "src/ok.py") == (root / "src" / "ok.py").resolve()
    assert inside_project(root, "inner") == (root / "src" / "ok.py").resolve()
    assert inside_project(root, root / "src") == (root / "src").resolve()
    for outside in ("key", "home/.ssh/id_rsa", "../proj/../x", "src/../../x", str(secret), "bad\0name"):
        assert inside_project(root, outside) is None, outside


def test_agents_md_linked_to_a_secret_is_noted_not_read(tmp_path, secret):
    root = tmp_path / "proj"
    (root / "src" / "api").mkdir(parents=True)
    (root / "AGENTS.md").symlink_to(secret)
    (root / "src" / "AGENTS.md").write_text("src rules\n")
    (root / "src" / "api").rmdir()
    (root / "src" / "api").symlink_to(secret.parent)  # a directory link: src/api/AGENTS.md would be ~/.ssh/AGENTS.md
    (secret.parent / "AGENTS.md").write_text(SECRET + " (as AGENTS.md)\n")
    files = read_instructions(root, ["src/api/x.py"])
    assert [(f.rel, f.refused) for f in files] == [("AGENTS.md", True), ("src/AGENTS.md", False),
                                                   ("src/api/AGENTS.md", True)]
    assert SECRET not in "".join(f.text for f in files)
    assert files[0].text == "[AGENTS.md leads outside the project (a symlink), so clovercode did not read it]"


def test_shipped_agents_md_symlink_never_reaches_the_model_screen_or_trajectory(tmp_path, secret, isolated_home):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "app.py").write_text("print('hi')\n")
    (project / "AGENTS.md").symlink_to(secret)  # as a clone checks it out: git stores symlinks
    make_git_repo(project)
    with StubServer(["clover"]) as stub:
        stub.script.append(reply(call("finish", summary="done")))
        proc = run_cli("exec", "look at app.py", "--endpoint", stub.url, "--sandbox", "none", "-C", str(project))
        assert len(stub.posts) == 1
    assert proc.returncode == 0, proc.stderr
    system = stub.posts[0]["body"]["messages"][0]["content"]
    assert "AGENTS.md leads outside the project" in system
    assert "AGENTS.md leads outside the project" in proc.stdout + proc.stderr  # the person is told too
    assert SECRET not in everything_recorded(stub, proc, isolated_home)


@pytest.mark.parametrize("sandbox", ["none", pytest.param("workspace-write", marks=pytest.mark.skipif(
    not HAS_BWRAP, reason="bubblewrap is not installed"))])
def test_agents_md_linked_by_a_command_never_reaches_the_next_turn(tmp_path, secret, isolated_home, sandbox):
    """The injection case: the model's own (sandboxed) command makes the link; the next turn's
    system prompt is rebuilt from AGENTS.md. ``fix`` runs full-auto, so the command runs unasked."""
    project = make_git_repo(tmp_path / "proj")
    (project / "app.py").write_text("print('hi')\n")
    with StubServer(["clover"]) as stub:
        stub.script += [reply(call("run_command", command=f"ln -s {secret} AGENTS.md")),
                        reply(call("finish", summary="done"))]
        proc = run_cli("fix", "tidy up", "--no-commit", "--test-command", "none", "--endpoint", stub.url,
                       "--sandbox", sandbox, "-C", str(project))
        assert len(stub.posts) == 2
    assert proc.returncode in (0, 4), proc.stderr  # 4: a new symlink is not a change fix commits
    assert (project / "AGENTS.md").is_symlink()  # the link itself is allowed; reading through it is not
    assert "AGENTS.md leads outside the project" in stub.posts[1]["body"]["messages"][0]["content"]
    assert SECRET not in everything_recorded(stub, proc, isolated_home)


def test_custom_command_linked_to_a_secret_is_not_loaded(tmp_path, secret):
    project = tmp_path / "proj"
    commands = project / ".clovercode" / "commands"
    commands.mkdir(parents=True)
    (commands / "x.md").symlink_to(secret)
    (commands / "ok.md").write_text("Explain $ARGUMENTS.\n")
    (commands / "inner.md").symlink_to("ok.md")
    notes: list[str] = []
    found = load_custom_commands(project, {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}, {"help"}, notes)
    assert sorted(found) == ["inner", "ok"]
    assert notes == ["custom command /x: .clovercode/commands/x.md leads outside the project (a symlink), "
                     "so clovercode did not read it"]
    shutil.rmtree(commands)
    (project / ".clovercode" / "commands").symlink_to(secret.parent)  # the whole directory elsewhere
    secret.with_name("y.md").write_text(SECRET + "\n")
    notes.clear()
    assert load_custom_commands(project, {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}, {"help"}, notes) == {}
    assert notes == ["custom commands: .clovercode/commands leads outside the project (a symlink), so "
                     "clovercode did not read it"]  # the directory there is not even listed


def test_custom_command_secret_never_reaches_help_or_the_model(tmp_path, secret, isolated_home):
    project = tmp_path / "proj"
    (project / ".clovercode" / "commands").mkdir(parents=True)
    (project / "app.py").write_text("print('hi')\n")
    (project / ".clovercode" / "commands" / "x.md").symlink_to(secret)
    make_git_repo(project)
    with StubServer(["clover"]) as stub:
        stub.script.append(reply("Nothing to do."))
        proc = run_cli("--endpoint", stub.url, "--sandbox", "none", "-C", str(project), input="/help\n/x now\n/exit\n")
    assert proc.returncode == 0, proc.stderr
    assert "custom command /x: .clovercode/commands/x.md leads outside the project" in proc.stdout
    assert "unknown command /x" in proc.stdout and stub.posts == []
    assert SECRET not in everything_recorded(stub, proc, isolated_home)


def test_mentions_through_dotdot_or_symlinks_are_refused_with_a_note(tmp_path, secret):
    root = tmp_path / "proj"
    (root / "docs").mkdir(parents=True)
    (root / "notes.txt").symlink_to(secret)
    (root / "docs" / "home").symlink_to(secret.parent.parent)
    (root / "docs" / "readme.md").write_text("hello\n")
    text = f"see @notes.txt @docs/home/.ssh/id_rsa @{os.path.relpath(secret, root)} @{secret} @docs/readme.md"
    out = expand_mentions(text, root, 10_000)
    assert [a.shown for a in out.attached] == ["docs/readme.md"]
    assert len(out.problems) == 4 and all("outside the project" in p for p in out.problems)
    assert SECRET not in out.text


def test_repo_map_never_parses_a_source_file_that_links_outside(tmp_path, secret):
    from clovercode.context.selection import select_files

    leaked = secret.with_name("settings.py")
    leaked.write_text("API_TOKEN = 'fake-token-91c2'\n")
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    pass\n")
    (root / "settings.py").symlink_to(leaked)
    (root / "alias.py").symlink_to("src/app.py")
    for listed_by_git in (False, True):
        if listed_by_git:
            make_git_repo(root)
        assert [f.rel for f in select_files(root, 1 << 20).files] == ["alias.py", "src/app.py"]

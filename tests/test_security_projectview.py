"""The project view (trust/projectview.py): links that lead out of the project are skipped in
listings, walks and searches and refused on direct access, whoever asks. Each attack here is one a
hostile repository (or a sandboxed `ln -s`) carried out against an earlier clovercode."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from conftest import git, make_git_repo, tool_call_text, write_replay
from rich.console import Console

from clovercode.front.acp.clientfs import ClientFiles
from clovercode.actions.bytecode import BytecodeGuard
from clovercode.actions.context import ToolContext, ToolError
from clovercode.actions.editing import edit_file
from clovercode.actions.fileio import DiskFiles
from clovercode.actions.files import list_files, search_text, view_file
from clovercode.ground.config import load_config
from clovercode.executors.local import LocalExecutor
from clovercode.front.review.command import ReviewRequest, run_review_command
from clovercode.trust.projectview import OutsideProject, ProjectView, SecretPath

MARKER = "PRIVATE-KEY-MARKER-7f3a"


@pytest.fixture
def cloned(tmp_path) -> tuple[Path, Path]:
    """(a repository cloned under ~/src/<repo>, the home beside it holding a key)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(f"-----BEGIN {MARKER}-----\n")
    repo = make_git_repo(home / "src" / "repo")
    (repo / "docs").mkdir()
    (repo / "docs" / "guide.md").write_text("the guide\n")
    (repo / "docs" / "dev-notes.md").symlink_to("../../../.ssh/id_rsa")
    (repo / "calc.py").write_text("def mean(v):\n    return sum(v) // len(v)\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "docs")
    return repo, home


def ctx_for(root: Path) -> ToolContext:
    return ToolContext(root, LocalExecutor())


def test_search_text_never_prints_what_a_link_out_of_the_project_leads_to(cloned):
    repo, _ = cloned
    ctx = ctx_for(repo)
    found = search_text(ctx, {"pattern": "."}).text
    assert "the guide" in found and MARKER not in found
    assert MARKER not in search_text(ctx, {"pattern": "BEGIN", "path": "docs"}).text
    assert "dev-notes" not in list_files(ctx, {}).text
    with pytest.raises(ToolError, match="outside the project"):
        view_file(ctx, {"path": "docs/dev-notes.md"})
    with pytest.raises(ToolError, match="outside the project"):
        search_text(ctx, {"pattern": ".", "path": "docs/dev-notes.md"})


def test_a_link_to_a_secret_inside_the_project_is_judged_by_its_target(tmp_path):
    """A project that is a home: `notes.txt -> .ssh/id_rsa` stays inside, and is still a secret."""
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa").write_text(MARKER)
    (tmp_path / "notes.txt").symlink_to(".ssh/id_rsa")
    view = ProjectView(tmp_path, [str(tmp_path / ".ssh")])
    with pytest.raises(SecretPath):
        view.read_bytes("notes.txt")
    assert "notes.txt" not in dict(view.listdir("."))
    assert list(view.walk()) == []


def test_the_bytecode_guard_never_deletes_through_a_pycache_link(cloned, tmp_path):
    repo, home = cloned
    other = home / "other" / "__pycache__"
    other.mkdir(parents=True)
    victim = other / "calc.cpython-311.pyc"
    victim.write_bytes(b"other project's bytecode")
    (repo / "__pycache__").symlink_to(other)  # what a sandboxed `ln -s` leaves behind
    ctx = ctx_for(repo)
    view_file(ctx, {"path": "calc.py"})
    edit_file(ctx, {"path": "calc.py", "old_text": "//", "new_text": "/"})
    assert victim.exists()
    guard = BytecodeGuard(repo)  # the after-command path: sources whose bytecode a command made stale
    guard.before_command()
    (repo / "calc.py").write_text("changed = 1\n")
    guard.after_command()
    assert victim.exists()


def test_the_view_resolves_beneath_the_root_like_openat2(tmp_path):
    root, outside = tmp_path / "p", tmp_path / "o"
    (root / "a").mkdir(parents=True)
    outside.mkdir()
    (outside / "f").write_text("out")
    (root / "a" / "f").write_text("in")
    (root / "inner").symlink_to("a")
    (root / "absolute").symlink_to(root / "a" / "f")  # an absolute link that names a place inside
    (root / "away").symlink_to(outside)
    (root / "back").symlink_to("../p/a")  # leaves the root, then returns: refused as openat2 does
    (root / "loop").symlink_to("loop")
    view = ProjectView(root)
    assert view.read_bytes("inner/f") == b"in" and view.read_bytes("absolute") == b"in"
    assert view.read_bytes(root / "a" / ".." / "inner" / "f") == b"in"
    for given in ("away/f", "back/f", "../o/f", "a/../../o/f", str(outside / "f"), "loop", "a/f\x00"):
        with pytest.raises(OutsideProject):
            view.read_bytes(given)
    with pytest.raises(OutsideProject):
        view.write_bytes("away/new", b"x")
    with pytest.raises(OutsideProject):
        view.delete("away/f")
    assert (outside / "f").read_text() == "out" and not (outside / "new").exists()
    assert sorted(view.walk()) == ["a/f", "absolute"]
    assert view.files_among(["inner/f", "away/f", "a/f", "absolute", "a", "missing", "back/f", "loop"]) == \
        ["inner/f", "a/f", "absolute"]  # what `git ls-files` lists, kept only where it stays inside


def test_a_directory_swapped_for_a_link_after_the_lookup_is_refused(tmp_path, monkeypatch):
    """The open walks descriptors with O_NOFOLLOW: a race that swaps `a` for a link out fails."""
    root, outside = tmp_path / "p", tmp_path / "o"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f").write_text("in")
    outside.mkdir()
    (outside / "f").write_text("out")
    view = ProjectView(root)
    parts = view.parts

    def then_swap(given, **kw):
        found = parts(given, **kw)
        if (root / "a").is_dir() and not (root / "a").is_symlink():
            os.rename(root / "a", root / "a-moved")
            (root / "a").symlink_to(outside)
        return found

    monkeypatch.setattr(view, "parts", then_swap)
    with pytest.raises(OutsideProject):
        view.read_bytes("a/f")


def test_a_fifo_is_not_read(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(OSError, match="not a regular file"):
        ProjectView(tmp_path).read_bytes("pipe")  # would block forever with a plain open()


def test_a_review_of_a_branch_with_a_link_to_a_secret_keeps_it_out_of_the_trajectory(cloned, tmp_path):
    repo, home = cloned
    runner = home / "actions-runner"
    runner.mkdir()
    (runner / ".credentials_rsaparams").write_text(MARKER)
    git(repo, "switch", "-q", "-c", "feature")
    (repo / "params.json").symlink_to("../../actions-runner/.credentials_rsaparams")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "add params")
    model = write_replay(tmp_path / "review.jsonl", tool_call_text("search_text", pattern="."),
                         tool_call_text("view_file", path="params.json"),
                         tool_call_text("list_files"), tool_call_text("finish", summary="looked"))
    out = io.StringIO()
    outcome = run_review(repo, model, Console(file=out, width=200))
    assert outcome.review is not None and outcome.review.trajectory is not None
    trajectory = outcome.review.trajectory.read_text()
    assert "the guide" in trajectory and "outside the project" in trajectory
    assert MARKER not in trajectory and MARKER not in out.getvalue()


def run_review(repo: Path, model: Path, console: Console):
    """`clovercode review --base main` in-process, with a replay model and no tests."""
    cfg = load_config(repo, dict(os.environ), {"sandbox": "none", "model": f"replay:{model}", "fix.test_command": "none"})
    return run_review_command(repo, cfg, ReviewRequest(base="main"), console)


def test_the_editor_is_never_sent_a_path_that_leads_out(cloned):
    """ACP: the editor opens what it is told, links included; a link out never reaches it."""
    repo, _ = cloned
    asked: list[str] = []

    def call(method, **params):
        asked.append(params["path"])
        return type("R", (), {"content": "guide"})()

    files = ClientFiles(call, "s1", DiskFiles(ProjectView(repo)))
    with pytest.raises(ToolError, match="outside the project"):
        files.read(repo / "docs" / "dev-notes.md", "docs/dev-notes.md")
    with pytest.raises(OSError):
        files.write(repo / "docs" / "dev-notes.md", b"x", None)
    assert files.read(repo / "docs" / "guide.md", "docs/guide.md").text == "guide"
    assert asked == [str(repo / "docs" / "guide.md")]


def test_writes_and_deletes_never_reach_through_a_link(tmp_path):
    root, outside = tmp_path / "p", tmp_path / "o"
    root.mkdir()
    outside.mkdir()
    (outside / "f").write_text("out")
    (root / "t.txt").write_text("target")
    (root / "inner").symlink_to("t.txt")
    view = ProjectView(root)
    view.write_bytes("inner", b"through")  # a link inside: the file tools write its target, as before
    assert (root / "t.txt").read_text() == "through" and (root / "inner").is_symlink()
    view.write_bytes("inner", b"replaced", follow_last=False)  # a checkpoint's restore: the link itself goes
    assert not (root / "inner").is_symlink() and (root / "t.txt").read_text() == "through"
    (root / "gone").symlink_to(outside / "f")
    view.delete("gone")
    assert not os.path.lexists(root / "gone") and (outside / "f").read_text() == "out"
    view.symlink("../o/f", "made")  # restored as recorded; following it later is refused
    with pytest.raises(OutsideProject):
        view.read_bytes("made")
    (root / "d").mkdir()
    (root / "d" / "x").write_text("x")
    with pytest.raises(OSError):
        view.rmdir("d")
    assert sorted(os.listdir(root)) == ["d", "inner", "made", "t.txt"]  # no temp file left behind

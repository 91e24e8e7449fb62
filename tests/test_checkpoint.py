"""Checkpoints and undo on real git repositories (with uncommitted, staged and untracked user work)
and on plain directories. Nothing the user had may be lost, and git's own state is never touched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clovercode.ground.errors import ExitCode
from clovercode.vcs.checkpoint import CHECKPOINTS, CheckpointError, Checkpointer, NothingToUndo, open_store, redo, undo
from conftest import EXAMPLES, git, make_git_repo, run_cli


def files_of(root: Path) -> dict[str, bytes | str]:
    """Every file below root except .git: bytes, or '-> target' for symlinks, plus exec bits."""
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        if ".git" in path.relative_to(root).parts:
            continue
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = f"-> {os.readlink(path)}"
        elif path.is_file():
            out[rel] = path.read_bytes() + (b" [x]" if path.stat().st_mode & 0o100 else b"")
    return out


def git_state(root: Path) -> dict[str, str]:
    return {"head": git(root, "rev-parse", "HEAD"), "branch": git(root, "branch", "--show-current"),
            "index": git(root, "ls-files", "-s"), "staged": git(root, "diff", "--cached"),
            "stash": git(root, "stash", "list"), "status": git(root, "status", "--porcelain", "--untracked-files=all"),
            "branches": git(root, "branch", "-a")}


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "app.py").write_text("print('v1')\n")
    (root / "lib.py").write_text("X = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "win.txt").write_bytes(b"a\r\nb\r\n")
    (root / ".gitattributes").write_text("*.txt text eol=lf\n")  # would rewrite CRLF if filters ran
    make_git_repo(root)
    # the user's uncommitted work: a modified file, a staged change, untracked files, an ignored log
    (root / "app.py").write_text("print('v2, not committed')\n")
    (root / "lib.py").write_text("X = 2\n")
    git(root, "add", "lib.py")
    (root / "lib.py").write_text("X = 3  # staged 2, then edited again\n")
    (root / "notes.md").write_text("my untracked notes\n")
    (root / "docs").mkdir()
    (root / "docs" / "draft.md").write_text("draft\n")
    (root / "debug.log").write_text("ignored, not ours\n")
    return root


def model_run(root: Path) -> None:
    """What an agent run might do: edit, create, delete, chmod, replace a dir, touch ignored files."""
    (root / "app.py").write_text("print('model')\n")
    (root / "notes.md").unlink()
    (root / "docs" / "draft.md").unlink()
    (root / "docs").rmdir()
    (root / "new_module.py").write_text("NEW = True\n")
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "sub" / "x.py").write_text("x\n")
    (root / "run.sh").chmod(0o644)
    (root / "win.txt").write_bytes(b"changed\n")
    (root / "link").symlink_to("app.py")
    (root / "build").mkdir()
    (root / "build" / "out.bin").write_bytes(b"\0")
    (root / "debug.log").write_text("appended by the model\n")


def test_undo_restores_uncommitted_and_untracked_work_without_touching_git(repo, isolated_home):
    before_files, before_git = files_of(repo), git_state(repo)
    assert Checkpointer(repo, os.environ, "fix the bug")() is None
    assert git_state(repo) == before_git  # recording touches neither index, HEAD, branches nor stash
    model_run(repo)
    result = undo(repo, os.environ)
    after = files_of(repo)
    ignored = {"debug.log", "build/out.bin"}  # ignored files are not checkpointed, so never touched
    assert {k: v for k, v in after.items() if k not in ignored} == {k: v for k, v in before_files.items() if k not in ignored}
    assert after["debug.log"] == b"appended by the model\n" and "build/out.bin" in after
    assert git_state(repo) == before_git
    assert "app.py" in result.changed and "new_module.py" in result.changed and "notes.md" in result.changed
    assert not (repo / "pkg").exists()  # directories the run created are gone again
    assert result.snapshot.label == "fix the bug"


def test_redo_brings_back_what_undo_replaced(repo):
    Checkpointer(repo, os.environ, "run")()
    model_run(repo)
    after_run = files_of(repo)
    undo(repo, os.environ)
    redo(repo, os.environ)
    assert files_of(repo) == after_run
    undo(repo, os.environ)  # and the redo is itself undoable
    assert (repo / "notes.md").read_text() == "my untracked notes\n"


def test_undo_with_user_edits_after_the_run_keeps_them_recoverable(repo):
    Checkpointer(repo, os.environ, "run")()
    model_run(repo)
    (repo / "mine.txt").write_text("written by the user after the run\n")
    undo(repo, os.environ)
    assert not (repo / "mine.txt").exists()
    redo(repo, os.environ)
    assert (repo / "mine.txt").read_text() == "written by the user after the run\n"


def test_nothing_to_undo(repo):
    with pytest.raises(NothingToUndo):
        undo(repo, os.environ)
    Checkpointer(repo, os.environ, "a run that changed nothing")()
    with pytest.raises(NothingToUndo):
        undo(repo, os.environ)  # its checkpoint equals the files now: skipped and dropped
    assert open_store(repo, os.environ).list(CHECKPOINTS) == []


def test_one_checkpoint_per_run_and_none_for_an_unchanged_tree(repo):
    first = Checkpointer(repo, os.environ, "run 1")
    first()
    first()
    Checkpointer(repo, os.environ, "run 2")()  # nothing changed in between
    assert [s.label for s in open_store(repo, os.environ).list(CHECKPOINTS)] == ["run 1"]
    (repo / "app.py").write_text("changed by run 2\n")
    Checkpointer(repo, os.environ, "run 3")()
    (repo / "app.py").write_text("changed by run 3\n")
    assert [s.label for s in open_store(repo, os.environ).list(CHECKPOINTS)] == ["run 3", "run 1"]
    undo(repo, os.environ)
    assert (repo / "app.py").read_text() == "changed by run 2\n"
    undo(repo, os.environ)
    assert (repo / "app.py").read_text() == "print('v2, not committed')\n"


def test_a_project_in_a_subdirectory_only_restores_its_own_files(tmp_path):
    root = tmp_path / "mono"
    (root / "svc").mkdir(parents=True)
    (root / "svc" / "a.py").write_text("a\n")
    (root / "other.py").write_text("other\n")
    make_git_repo(root)
    Checkpointer(root / "svc", os.environ, "run")()
    (root / "svc" / "a.py").write_text("model\n")
    (root / "other.py").write_text("user, elsewhere in the repo\n")
    undo(root / "svc", os.environ)
    assert (root / "svc" / "a.py").read_text() == "a\n"
    assert (root / "other.py").read_text() == "user, elsewhere in the repo\n"


def test_plain_directories_get_checkpoints_too(tmp_path, isolated_home):
    root = tmp_path / "plain"
    root.mkdir()
    (root / "a.py").write_text("a\n")
    (root / "tool.sh").write_text("#!/bin/sh\n")
    (root / "tool.sh").chmod(0o700)
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text("b\n")
    (root / "alias").symlink_to("a.py")
    (root / "node_modules").mkdir()
    (root / "node_modules" / "dep.js").write_text("dep\n")
    before = files_of(root)
    assert Checkpointer(root, os.environ, "plain run")() is None
    (root / "a.py").write_text("model\n")
    (root / "sub" / "b.txt").unlink()
    (root / "new.txt").write_text("new\n")
    (root / "tool.sh").chmod(0o644)
    (root / "alias").unlink()
    (root / "alias").symlink_to("new.txt")
    result = undo(root, os.environ)
    assert files_of(root) == before
    assert (root / "tool.sh").stat().st_mode & 0o777 == 0o700
    assert set(result.changed) == {"a.py", "sub/b.txt", "new.txt", "tool.sh", "alias"}
    assert (isolated_home / ".local" / "state" / "clovercode" / "checkpoints").is_dir()
    redo(root, os.environ)
    assert (root / "a.py").read_text() == "model\n" and not (root / "sub" / "b.txt").exists()


def test_fix_then_clovercode_undo_restores_the_file(calc_repo):
    original = (calc_repo / "calc.py").read_text()
    (calc_repo / "scratch.txt").write_text("untracked user work\n")
    proc = run_cli("fix", "mean() is wrong", "--repo", str(calc_repo), "--model",
                   f"replay:{EXAMPLES / 'calc.replay.jsonl'}", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["changed_files"] == ["calc.py"]
    assert (calc_repo / "calc.py").read_text() != original
    listed = run_cli("undo", "--list", "--repo", str(calc_repo))
    assert "mean() is wrong" in listed.stdout
    proc = run_cli("undo", "--repo", str(calc_repo))
    assert proc.returncode == 0, proc.stderr
    assert "Restored" in proc.stdout and "calc.py" in proc.stdout  # (and the __pycache__ the tests made)
    assert (calc_repo / "calc.py").read_text() == original
    assert (calc_repo / "scratch.txt").read_text() == "untracked user work\n"
    again = run_cli("undo", "--repo", str(calc_repo))
    assert again.returncode == int(ExitCode.USAGE) and "nothing to undo" in again.stderr
    proc = run_cli("undo", "--redo", "--repo", str(calc_repo))
    assert proc.returncode == 0 and "sum(values) / len(values)" in (calc_repo / "calc.py").read_text()


@pytest.mark.parametrize("kind", ["git", "plain"])
def test_undo_never_writes_through_a_directory_replaced_by_a_symlink(tmp_path, isolated_home, kind):
    root, victim = tmp_path / "proj", tmp_path / "victim"
    (root / "pkg").mkdir(parents=True)
    victim.mkdir()
    (root / "pkg" / "mod.py").write_text("payload = 'from the checkpoint'\n")
    if kind == "git":
        make_git_repo(root)
    assert Checkpointer(root, os.environ, "run")() is None
    # A command replaces the checkpointed directory by a link out of the project (git: one it ignores).
    for child in (root / "pkg").iterdir():
        child.unlink()
    (root / "pkg").rmdir()
    (root / "pkg").symlink_to(victim)
    (victim / "mod.py").write_text("the victim's own\n")
    (root / ".gitignore").write_text("pkg\n")
    with pytest.raises(CheckpointError, match="pkg/mod.py: a directory on its way is now a symlink"):
        undo(root, os.environ)
    assert sorted(os.listdir(victim)) == ["mod.py"]
    assert (victim / "mod.py").read_text() == "the victim's own\n"

"""The smaller holes of issue 45: `ci init` wrote through a shipped `.github` link, `clovercode.toml`
was parsed through a link out of the project, and `list_files` printed a newline in a name raw (one
file shown as two). Each now goes through the project view or is written out visibly."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import run_cli

from clovercode.actions.context import ToolContext
from clovercode.actions.files import list_files, search_text
from clovercode.actions.guards import FileGuard
from clovercode.executors.local import LocalExecutor
from clovercode.ground.config import load_config


def test_ci_init_refuses_a_github_link_out_of_the_project(tmp_path):
    project, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / ".github").symlink_to(elsewhere)
    proc = run_cli("ci", "init", "--repo", str(project))
    assert proc.returncode == 2, proc.stderr
    assert "leads outside the project" in proc.stderr and "Traceback" not in proc.stderr
    assert list(elsewhere.iterdir()) == []


def test_ci_init_refuses_a_github_link_inside_the_project(tmp_path):
    project = tmp_path / "proj"
    (project / "docs").mkdir(parents=True)
    (project / ".github").symlink_to("docs")
    proc = run_cli("ci", "init", "--repo", str(project))
    assert proc.returncode == 2 and "is a link" in proc.stderr, proc.stderr
    assert list((project / "docs").iterdir()) == []
    os.unlink(project / ".github")
    assert run_cli("ci", "init", "--repo", str(project)).returncode == 0  # a real directory: written
    assert (project / ".github" / "workflows" / "clovercode.yml").is_file()


def test_a_clovercode_toml_that_leads_outside_is_not_parsed(tmp_path, isolated_home):
    project, outside = tmp_path / "proj", tmp_path / "outside.toml"
    project.mkdir()
    outside.write_text("max_steps = 3\n")
    (project / "clovercode.toml").symlink_to(outside)
    cfg = load_config(project, {})
    assert cfg["max_steps"] == 30 and cfg.sources["max_steps"] == "default"
    assert any("leads outside the project" in note for note in cfg.declared.notes)
    os.unlink(project / "clovercode.toml")
    (project / "settings").mkdir()
    (project / "settings" / "cc.toml").write_text("max_steps = 4\n")
    (project / "clovercode.toml").symlink_to("settings/cc.toml")  # a link inside the project is its own file
    assert load_config(project, {})["max_steps"] == 4


def test_list_files_writes_a_newline_in_a_name_out(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "ok.py").write_text("x = 1\n")
    (root / "evil\nmain.py").write_text("x = 2\n")
    ctx = ToolContext(root, LocalExecutor(), guard=FileGuard.from_policy_data(os.environ, root))
    lines = list_files(ctx, {}).text.splitlines()
    assert lines == ["evil\\nmain.py", "ok.py"]
    assert search_text(ctx, {"pattern": "x = 2"}).text.splitlines() == ["evil\\nmain.py:1: x = 2"]
    assert Path(root / "evil\nmain.py").exists()

"""`clovercode ci init`: the workflow file, checked by GitHub's own workflow parser."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import run_cli
from npm_fixtures import workflow_parser_dir

from clovercode.errors import UsageError
from clovercode.github.workflow import WorkflowOptions, render_workflow

CHECKER = Path(__file__).resolve().parent / "check_workflow.mjs"


@pytest.fixture(scope="session")
def parse_workflow():
    """Runs @actions/workflow-parser (installed from npm on first use) on a workflow file."""
    prefix = workflow_parser_dir()
    node = shutil.which("node")
    assert node, "node is not installed; scripts/setup.sh installs it"

    def parse(path: Path) -> dict:
        proc = subprocess.run([node, str(CHECKER), str(prefix), str(path)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    return parse


def test_ci_init_writes_a_valid_workflow(tmp_path, parse_workflow):
    proc = run_cli("ci", "init", "--repo", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / ".github" / "workflows" / "clovercode.yml"
    parsed = parse_workflow(path)
    assert parsed["errors"] == []
    [job] = parsed["jobs"]
    assert job["id"] == "fix" and "github.event.label.name == 'clovercode'" in job["if"]
    assert "startsWith(github.event.comment.body, '/clovercode')" in job["if"]
    assert "author_association" in job["if"]  # strangers cannot start jobs on a self-hosted runner
    workflow = yaml.safe_load(path.read_text())
    assert workflow["permissions"] == {"contents": "write", "pull-requests": "write", "issues": "read"}
    assert workflow[True] == {"issues": {"types": ["labeled"]}, "issue_comment": {"types": ["created"]}}  # YAML 1.1 'on'
    assert workflow["jobs"]["fix"]["runs-on"] == ["self-hosted", "linux", "gpu"]
    fix_step = next(s for s in workflow["jobs"]["fix"]["steps"] if s.get("name") == "Fix the issue")
    assert 'clovercode fix --github-issue "$ISSUE" --pr --json' in fix_step["run"]
    assert fix_step["env"]["GITHUB_TOKEN"] == "${{ secrets.GITHUB_TOKEN }}"
    assert fix_step["env"]["CLOVERCODE_FIX_PUSH_TOKEN"] == "true"  # pushes with the token ...
    assert workflow["jobs"]["fix"]["steps"][0]["with"] == {"persist-credentials": False}  # ... not kept in .git/config
    assert fix_step["env"]["CLOVERCODE_GITHUB_API_URL"] == "${{ github.api_url }}"  # GitHub Enterprise too
    # the issue text never reaches the shell through an expression (script injection)
    assert "github.event.issue.title" not in path.read_text() and "comment.body }}" not in path.read_text()

    again = run_cli("ci", "init", "--repo", str(tmp_path))
    assert again.returncode == 2 and "already exists" in again.stderr and "--force" in again.stderr
    forced = run_cli("ci", "init", "--repo", str(tmp_path), "--force", "--model-on", "endpoint", "--label", "bot fix")
    assert forced.returncode == 0, forced.stderr
    assert parse_workflow(path)["errors"] == []
    text = path.read_text()
    assert "runs-on: ubuntu-latest" in text and "CLOVERCODE_ENDPOINT: ${{ vars.CLOVERCODE_ENDPOINT }}" in text
    assert "bubblewrap" in text and "'bot fix'" in text


def test_the_parser_catches_a_broken_workflow(tmp_path, parse_workflow):
    path = tmp_path / "broken.yml"
    path.write_text(render_workflow(WorkflowOptions()).replace("runs-on:", "runs_on:"))
    assert parse_workflow(path)["errors"]


@pytest.mark.parametrize("options, message", [
    (WorkflowOptions(model_on="cloud"), "--model-on"),
    (WorkflowOptions(label="x' || true || '"), "--label"),
    (WorkflowOptions(command="clovercode"), "--command"),
    (WorkflowOptions(runner="self-hosted,gpu; rm"), "--runner"),
])
def test_values_that_would_break_the_workflow_are_refused(options, message):
    with pytest.raises(UsageError, match=message.replace("-", r"\-")):
        render_workflow(options)


def test_docs_show_the_workflow_as_written():
    docs = (Path(__file__).resolve().parent.parent / "docs" / "ci.md").read_text()
    block = docs.split("The workflow (default options), as written:\n\n```yaml\n", 1)[1].split("```\n", 1)[0]
    assert yaml.safe_load(block) == yaml.safe_load(render_workflow(WorkflowOptions()))

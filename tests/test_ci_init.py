"""`clovercode ci init`: the workflow file, checked by GitHub's own workflow parser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import run_cli
from npm_fixtures import workflow_parser_dir

from clovercode.ground.errors import UsageError
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
    assert workflow["permissions"] == {}  # nothing by default: each job asks for what it uses
    assert workflow["jobs"]["fix"]["permissions"] == {"contents": "write", "pull-requests": "write", "issues": "read"}
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


SHA = "0123456789abcdef0123456789abcdef01234567"


def install_steps(text: str) -> list[dict]:
    return [s for s in yaml.safe_load(text)["jobs"]["fix"]["steps"] if "Install clovercode" in s.get("name", "")]


@pytest.mark.parametrize("model_on", ["gpu-runner", "endpoint"])
def test_the_workflow_never_installs_clovercode_by_name_from_pypi(model_on):
    """clovercode is not on PyPI: a bare requirement would install whoever takes the name."""
    from packaging.requirements import Requirement

    text = render_workflow(WorkflowOptions(model_on=model_on))
    [step] = install_steps(text)
    assert step["env"] == {"CLOVERCODE_SOURCE": "${{ vars.CLOVERCODE_SOURCE }}"}
    installs = [line for line in step["run"].splitlines() if "pip\" install" in line or line.strip().startswith("pip install")]
    assert installs and all("@ $CLOVERCODE_SOURCE\"" in line for line in installs)
    assert '"clovercode[engine]"' not in text and '"clovercode"' not in text
    # once the variable is filled in, pip gets a direct reference: no index is ever asked
    line = installs[0].replace("$CLOVERCODE_SOURCE", f"git+https://github.com/acme/clovercode@{SHA}")
    requirement = Requirement(line.split('"')[-2])
    assert requirement.name == "clovercode" and requirement.url == f"git+https://github.com/acme/clovercode@{SHA}"


def test_an_unset_source_stops_the_job_before_installing(tmp_path):
    [step] = install_steps(render_workflow(WorkflowOptions()))
    script = tmp_path / "install.sh"
    script.write_text(step["run"])
    proc = subprocess.run(["bash", "-e", str(script)], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "CLOVERCODE_SOURCE": "", "RUNNER_TEMP": str(tmp_path)})
    assert proc.returncode == 1 and "::error::Set the repository variable CLOVERCODE_SOURCE" in proc.stdout
    assert not (tmp_path / "clovercode-venv").exists()


def test_a_pinned_source_is_written_into_the_workflow(tmp_path, parse_workflow):
    source = f"git+https://github.com/acme/clovercode@{SHA}"
    proc = run_cli("ci", "init", "--repo", str(tmp_path), "--source", source)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / ".github" / "workflows" / "clovercode.yml"
    assert parse_workflow(path)["errors"] == []
    [step] = install_steps(path.read_text())
    assert step["env"] == {"CLOVERCODE_SOURCE": source} and "::error::" not in step["run"]
    assert f"installed from {source}" in " ".join(proc.stdout.split())


@pytest.mark.parametrize("source, message", [
    ("git+https://github.com/acme/clovercode@main", "the ref 'main' looks like a branch"),
    ("git+https://github.com/acme/clovercode", "no ref is named"),
    ("clovercode[engine]", "a package name would install whatever PyPI serves under that name"),
    ("clovercode==0.3.0", "a package name would install whatever PyPI serves"),
    ("http://example.com/clovercode-0.3.0-py3-none-any.whl", "use https"),
])
def test_an_unpinned_or_named_source_is_refused(tmp_path, source, message):
    proc = run_cli("ci", "init", "--repo", str(tmp_path), "--source", source)
    assert proc.returncode == 2 and message in " ".join(proc.stderr.split()), proc.stderr
    assert not (tmp_path / ".github").exists()


@pytest.mark.parametrize("source, warning", [
    ("https://example.com/clovercode-0.3.0-py3-none-any.whl", "is not pinned by its hash"),
    ("git+https://github.com/acme/clovercode@v0.3.0", "pins the source only as long as nobody moves it"),
    ("https://example.com/clovercode-0.3.0-py3-none-any.whl#sha256=" + "a" * 64, None),
    ("/opt/wheels/clovercode-0.3.0-py3-none-any.whl", None),
])
def test_weaker_pins_are_written_with_a_loud_warning(tmp_path, source, warning):
    proc = run_cli("ci", "init", "--repo", str(tmp_path), "--source", source)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert (warning in out) if warning else ("warning" not in out)


@pytest.mark.parametrize("direct_url, expected", [
    ({"url": "https://github.com/acme/clovercode", "vcs_info": {"vcs": "git", "commit_id": SHA}},
     f"git+https://github.com/acme/clovercode@{SHA}"),
    ({"url": "file:///home/me/clovercode", "dir_info": {"editable": True}}, None),  # a local checkout: not for a runner
    (None, None),
])
def test_without_source_the_git_commit_clovercode_came_from_is_used(monkeypatch, direct_url, expected):
    """pip records where a package came from (direct_url.json); that exact commit is a pinned default."""
    from clovercode.github import install_source

    class Dist:
        def read_text(self, name):
            assert name == "direct_url.json"
            return json.dumps(direct_url) if direct_url is not None else None

    monkeypatch.setattr(install_source.metadata, "distribution", lambda name: Dist())
    assert install_source.installed_source() == expected


@pytest.mark.parametrize("code, step_code, annotation", [
    (0, 0, ""), (1, 0, ""), (4, 0, "::warning::clovercode made no pull request"),
    (8, 8, "::error::the change touches CI definitions"),
    (9, 9, "::error::clovercode opened a draft pull request, but no test shows the issue fixed"), (7, 7, "")])
def test_the_fix_step_treats_unverified_as_a_failure(tmp_path, code, step_code, annotation):
    """Issue 26: exit code 9 (unverified: a draft pull request no test shows fixed) is not a success."""
    steps = yaml.safe_load(render_workflow(WorkflowOptions()))["jobs"]["fix"]["steps"]
    [step] = [s for s in steps if s.get("name") == "Fix the issue"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "clovercode"
    fake.write_text(f"#!/bin/sh\necho '{{\"exit_code\": {code}}}'\nexit {code}\n")
    fake.chmod(0o755)
    script = tmp_path / "fix.sh"
    script.write_text(step["run"])
    proc = subprocess.run(["bash", "-e", str(script)], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "RUNNER_TEMP": str(tmp_path),
                               "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "ISSUE": "o/r#1"})
    assert proc.returncode == step_code, proc.stdout + proc.stderr
    assert annotation in proc.stdout
    assert f"exited with {code}" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("model_on, needs", [("gpu-runner", {"engine", "context"}), ("endpoint", {"context"})])
def test_each_mode_installs_the_extras_its_run_needs(model_on, needs):
    """The endpoint bot once installed clovercode bare: no repository map for the model (issue 25)."""
    from packaging.requirements import Requirement

    [step] = install_steps(render_workflow(WorkflowOptions(model_on=model_on)))
    [line] = [line for line in step["run"].splitlines() if "install --quiet" in line]
    requirement = Requirement(line.split('"')[-2].replace("$CLOVERCODE_SOURCE", f"git+https://github.com/a/b@{SHA}"))
    assert requirement.extras == needs


def test_ci_init_review_and_respond_workflows(tmp_path, parse_workflow):
    """The review and respond workflows: GitHub's parser accepts them; triggers, guards, least privilege."""
    source = "git+https://github.com/octo/clovercode@" + "a" * 40
    proc = run_cli("ci", "init", "--repo", str(tmp_path), "--review", "--respond", "--source", source)
    assert proc.returncode == 0, proc.stderr
    flows = tmp_path / ".github" / "workflows"
    assert sorted(p.name for p in flows.iterdir()) == ["clovercode-respond.yml", "clovercode-review.yml"]
    review_path, respond_path = flows / "clovercode-review.yml", flows / "clovercode-respond.yml"
    for path in (review_path, respond_path):
        assert parse_workflow(path)["errors"] == [], path.name
        text = path.read_text()
        assert f'clovercode[engine,context] @ $CLOVERCODE_SOURCE' in text and f'"{source}"' in text  # the pinned source
        assert "comment.body }}" not in text and "review.body }}" not in text and "--trust-project" not in text
        assert yaml.safe_load(text)["permissions"] == {}
    review = yaml.safe_load(review_path.read_text())
    assert review[True] == {"pull_request": {"types": ["opened", "synchronize", "ready_for_review"]}}
    job = review["jobs"]["review"]
    assert job["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert "head.repo.full_name == github.repository" in job["if"]  # no fork code on the runner
    assert review["concurrency"]["group"] == "clovercode-review-${{ github.event.pull_request.number }}"
    assert job["steps"][0]["with"]["ref"] == "${{ github.event.pull_request.head.sha }}"
    assert 'clovercode review --github-pr "$PULL" --post --json' in job["steps"][-1]["run"]
    respond = yaml.safe_load(respond_path.read_text())
    assert respond[True] == {"issue_comment": {"types": ["created"]}, "pull_request_review_comment": {"types": ["created"]},
                             "pull_request_review": {"types": ["submitted"]}}
    job = respond["jobs"]["respond"]
    assert job["permissions"] == {"contents": "write", "pull-requests": "write", "issues": "write"}
    assert "'@clovercode'" in job["if"] and "author_association" in job["if"] and "!= 'Bot'" in job["if"]
    assert "github.event.issue.number || github.event.pull_request.number" in respond["concurrency"]["group"]
    step = job["steps"][-1]
    assert step["env"]["COMMENT_URL"] == "${{ github.event.comment.html_url || github.event.review.html_url }}"
    assert 'clovercode respond --github-comment "$COMMENT_URL"' in step["run"]
    # asking again without --force changes nothing; a bad mention writes nothing
    again = run_cli("ci", "init", "--repo", str(tmp_path), "--review")
    assert again.returncode == 2 and "already exists" in again.stderr
    (tmp_path / "x").mkdir()
    bad = run_cli("ci", "init", "--repo", str(tmp_path / "x"), "--respond", "--mention", "@x' || true || '")
    assert bad.returncode == 2 and "--mention" in bad.stderr and not (tmp_path / "x" / ".github").exists()


PINNED = re.compile(r"^\s*(?:- )?uses: [\w.-]+/[\w./-]+@[0-9a-f]{40}  # v\d+(?:\.\d+)*$")


def all_workflows(where: Path) -> list[Path]:
    for model_on in ("gpu-runner", "endpoint"):
        proc = run_cli("ci", "init", "--repo", str(where / model_on), "--review", "--respond", "--fix",
                       "--model-on", model_on)
        assert proc.returncode == 0, proc.stderr
    return sorted(where.glob("*/.github/workflows/*.yml"))


def test_written_workflows_pin_actions_by_commit_and_zizmor_finds_nothing(tmp_path):
    for model_on in ("gpu-runner", "endpoint"):
        (tmp_path / model_on).mkdir()
    paths = all_workflows(tmp_path)
    assert len(paths) == 6
    for path in paths:
        uses = [line for line in path.read_text().splitlines() if re.match(r"^\s*(?:- )?uses:", line)]
        assert uses and all(PINNED.match(line) for line in uses), (path, uses)  # a tag can move; a commit cannot
        jobs = yaml.safe_load(path.read_text())["jobs"]
        assert yaml.safe_load(path.read_text())["permissions"] == {} and all("permissions" in j for j in jobs.values())
    zizmor = shutil.which("zizmor", path=str(Path(sys.executable).parent)) or shutil.which("zizmor")
    assert zizmor, "zizmor is in the test extra: pip install -e '.[test]'"
    proc = subprocess.run([zizmor, "--offline", "--format", "json", *map(str, paths)], capture_output=True, text=True,
                          timeout=120)
    findings = json.loads(proc.stdout or "[]")
    assert findings == [], json.dumps(findings, indent=1)[:3000]

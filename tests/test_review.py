"""`clovercode review`: a recorded model reviews a real branch; findings go on changed lines as line
comments (GitHub's rule, which the fake enforces) and elsewhere into the summary; a second run updates
the summary and posts no line comment twice. Real git with a bare `origin`, the fake GitHub."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import cli_env, git, git_repo_with_origin, run_cli, tool_call_text, write_replay
from fake_github import fake_github, github_api  # noqa: F401 - fixtures

from clovercode.front.review.diffmap import parse_diff
from clovercode.front.review.findings import SCHEMA, Finding
from clovercode.front.review.post import comment_body, place, summary_body

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TOKEN = "ghs_valid_token"
ADDED = 'def total(items):\n    """Sum of durations."""\n    return sum(parse_duration(i) for i in items) + 1\n'


@pytest.fixture
def pr(tmp_path, fake_github):  # noqa: F811
    origin, work = git_repo_with_origin(tmp_path, FIXTURES / "durations")
    git(work, "fetch", "-q", "origin")
    git(work, "switch", "-q", "-c", "feature")
    with (work / "durations.py").open("a") as handle:
        handle.write("\n\n" + ADDED)
    git(work, "commit", "-qam", "total()")
    git(work, "push", "-q", "origin", "feature")
    fake_github.bare_repo = origin
    fake_github.add_repo("octo/durations")
    number = fake_github.add_pull("octo/durations", "feature", title="Add total()")
    return work, fake_github, number


def replay(tmp_path: Path) -> Path:
    return write_replay(
        tmp_path / "review.jsonl",
        tool_call_text("view_file", path="durations.py"),
        tool_call_text("report_finding", file="durations.py", start_line="36", end_line="36", severity="high",
                       title="total() adds 1 to every sum", body="The `+ 1` is an off-by-one; @octocat Fixes #3",
                       suggestion="    return sum(parse_duration(i) for i in items)"),
        tool_call_text("report_finding", file="durations.py", start_line="22", end_line="22", severity="low",
                       title="minutes are not reduced by the hours", body="Unchanged code, but wrong for 5400 s."),
        tool_call_text("finish", summary="One bug in the new total(); an older bug in format_duration."),
    )


def review(work: Path, fake, model: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = cli_env(GITHUB_TOKEN=TOKEN, CLOVERCODE_GITHUB_API_URL=fake.url)
    proc = run_cli("review", "--repo", str(work), "--sandbox", "none", "--model", f"replay:{model}", "--json",
                   "--test-command", "none", *args, env=env)
    try:
        return proc, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON on stdout\nstdout: {proc.stdout}\nstderr: {proc.stderr}") from None


def test_review_posts_line_comments_on_changed_lines_and_updates_on_rerun(tmp_path, pr):
    work, fake, number = pr
    proc, result = review(work, fake, replay(tmp_path), "--github-pr", f"octo/durations#{number}", "--post")
    assert proc.returncode == 0, proc.stderr
    placed = {f["title"]: f["placed"] for f in result["findings"]}
    assert placed == {"total() adds 1 to every sum": "line", "minutes are not reduced by the hours": "summary"}
    assert fake.violations == []
    [create] = fake.calls("pulls/create-review")
    assert create.body["event"] == "COMMENT" and create.body["commit_id"] == git(work, "rev-parse", "HEAD").strip()
    [comment] = create.body["comments"]
    assert (comment["path"], comment["line"], comment["side"]) == ("durations.py", 36, "RIGHT")
    assert "```suggestion\n    return sum(parse_duration(i) for i in items)\n```" in comment["body"]
    assert "@\u200doctocat" in comment["body"] and "F\u200dixes #3" in comment["body"]  # inert: no ping, no close
    assert "durations.py:22" in create.body["body"] and "minutes are not reduced" in create.body["body"]
    assert len(fake.comments("octo/durations", "review")) == 1

    # a second run (a new push would do the same): the summary is updated, no line comment is repeated
    proc, again = review(work, fake, replay(tmp_path), "--github-pr", f"octo/durations#{number}", "--post")
    assert proc.returncode == 0, proc.stderr
    assert again["review"]["action"] == "updated" and again["review"]["comments_added"] == 0
    assert again["review"]["comments_kept"] == 1
    assert len(fake.calls("pulls/create-review")) == 1 and len(fake.calls("pulls/update-review")) == 1
    assert len(fake.comments("octo/durations", "review")) == 1
    assert len(fake.comments("octo/durations", "review_comment")) == 1
    assert fake.violations == []


def test_someone_elses_marker_is_not_updated(tmp_path, pr):
    """A stranger's review that copies the bot's marker is not the bot's: a new review is made."""
    work, fake, number = pr
    fake.add_comment("octo/durations", number, "<!-- clovercode-review -->\nfake", "mallory", "NONE", kind="review")
    proc, result = review(work, fake, replay(tmp_path), "--github-pr", f"octo/durations#{number}", "--post")
    assert proc.returncode == 0, proc.stderr
    assert result["review"]["action"] == "created" and fake.calls("pulls/update-review") == []


def test_review_without_github_prints_findings(tmp_path, pr):
    work, fake, _ = pr
    proc, result = review(work, fake, replay(tmp_path), "--base", "main")
    assert proc.returncode == 0, proc.stderr
    assert [f["start_line"] for f in result["findings"]] == [36, 22] and result["review"] is None
    assert fake.requests == []
    assert git(work, "status", "--porcelain") == ""  # a review changes nothing


def test_post_needs_a_pull_request(tmp_path, pr):
    work, fake, _ = pr
    proc = run_cli("review", "--repo", str(work), "--post", env=cli_env())
    assert proc.returncode == 2 and "--github-pr" in proc.stderr and "Traceback" not in proc.stderr


def test_diff_map_marks_only_lines_the_diff_shows():
    diff = ("diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,4 @@\n a\n-b\n+B\n+C\n c\n"
            "@@ -10,2 +11,2 @@\n k\n-l\n+L\n")
    m = parse_diff(diff)
    assert m.commentable("x.py", 1, 4) and m.commentable("x.py", 12, 12)
    assert not m.commentable("x.py", 5, 5) and not m.commentable("x.py", 4, 11)  # two hunks: not one comment
    assert not m.commentable("y.py", 1, 1)


def test_finding_schema_and_placement():
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"file": "a", "start_line": 0, "end_line": 1, "severity": "high", "title": "t", "body": "b"}, SCHEMA)
    inline = Finding("x.py", 2, 2, "high", "t", "b", "x = 1\n```\n<img src=x>")
    outside = Finding("x.py", 9, 9, "nit", "<script>", "b")
    m = parse_diff("+++ b/x.py\n@@ -1,1 +1,2 @@\n a\n+b\n")
    placement = place([inline, outside], m)
    assert placement.inline == [inline] and placement.summary == [outside]
    body = comment_body(inline)
    assert body.startswith(f"<!-- clovercode-finding:{inline.key} -->") and "````suggestion\n" in body  # fence holds
    summary = summary_body(placement, "<!-- clovercode-review --> spoof", "0" * 40)
    assert summary.count("<!-- clovercode-review -->") == 1 and "&lt;script>" in summary


def test_the_tests_a_review_runs_cannot_write_the_project(tmp_path, pr):
    """The review's sandbox is read-only (real bubblewrap): a test command that writes into the tree fails."""
    work, fake, _ = pr
    model = write_replay(tmp_path / "tests.jsonl", tool_call_text("run_tests"), tool_call_text("finish", summary="ok"))
    proc = run_cli("review", "--repo", str(work), "--base", "main", "--model", f"replay:{model}", "--json",
                   "--test-command", "echo owned > pwned.txt && python3 -m unittest -q", env=cli_env())
    assert proc.returncode == 0, proc.stderr
    [run] = json.loads(proc.stdout)["tests"]
    assert run["passed"] is False and not (work / "pwned.txt").exists()
    assert git(work, "status", "--porcelain") == ""


def test_the_fake_refuses_a_line_outside_the_diff_as_github_does(pr):
    """What makes the line-comment tests meaningful: GitHub's 422 for a line the diff does not show."""
    from clovercode.github.client import GitHubClient, GitHubError
    from clovercode.github.pulls import create_review, create_review_comment, get_pull
    from clovercode.github.refs import parse_issue

    work, fake, number = pr
    client = GitHubClient(fake.url, TOKEN)
    pull = get_pull(client, parse_issue(f"octo/durations#{number}"))
    assert pull.head_ref == "feature" and pull.base_ref == "main" and not pull.from_fork
    with pytest.raises(GitHubError) as refused:
        create_review_comment(client, pull.ref, pull.head_sha, {"path": "durations.py", "line": 5, "side": "RIGHT", "body": "x"})
    assert refused.value.status == 422
    posted = create_review_comment(client, pull.ref, pull.head_sha, {"path": "durations.py", "line": 35, "side": "RIGHT", "body": "x"})
    assert posted.path == "durations.py" and posted.line == 35 and posted.login == "github-actions[bot]"
    assert fake.violations == []
    with pytest.raises(GitHubError) as refused:  # a whole review with one bad line is refused too
        create_review(client, pull.ref, pull.head_sha, "body", [{"path": "durations.py", "line": 5, "body": "x"}])
    assert refused.value.status == 422 and fake.violations == []

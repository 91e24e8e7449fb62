"""The `review` and `respond` commands (registered on the CLI's app by clovercode/front/cli.py)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import typer

from clovercode.front.app import (ApiKeyOpt, EndpointOpt, ModelOpt, RepoOpt, SandboxOpt, TrustOpt, app,
                                  effective_config, report_error, workspace_root)
from clovercode.ground.errors import CloverError
from clovercode.ground.termination import signals_as_interrupts
from clovercode.ui.console import make_console


@contextmanager
def one_json_error(as_json: bool) -> Iterator[None]:
    """With --json, a CloverError still ends in the one JSON object a bot reads (and its exit code)."""
    try:
        yield
    except CloverError as exc:
        if not as_json:
            raise
        report_error(exc)
        typer.echo(json.dumps({"status": "error", "exit_code": int(exc.exit_code), "error": str(exc)}))
        raise typer.Exit(int(exc.exit_code)) from None


@app.command("review")
@signals_as_interrupts()
def review_command(
    base: Optional[str] = typer.Option(None, "--base", help="Compare with this ref (default: the merge base with the default branch)."),
    github_pr: Optional[str] = typer.Option(None, "--github-pr", help="Review pull request OWNER/REPO#N (HEAD must be its head)."),
    post: bool = typer.Option(False, "--post", help="Publish the review on the pull request (line comments + summary)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON result object on stdout (for CI bots)."),
    repo: Optional[Path] = RepoOpt,
    model: Optional[str] = ModelOpt,
    sandbox: Optional[str] = SandboxOpt,
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Most model turns."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Wall-clock budget in seconds."),
    test_command: Optional[str] = typer.Option(None, "--test-command", help="Command that runs the tests ('none': no tests)."),
    endpoint: Optional[str] = EndpointOpt,
    api_key: Optional[str] = ApiKeyOpt,
    trust_project: bool = TrustOpt,
) -> None:
    """Review a change with read-only tools and the tests: findings with file, lines, severity, suggestion.

    Exit codes: 0 reviewed, 3 gave up, 4 nothing to review, 5 model, 6 sandbox, 7 git/GitHub, 130 interrupted (docs/ci.md)."""
    from clovercode.front.review.command import ReviewRequest, print_review, run_review_command

    console = make_console(stderr=as_json)
    with one_json_error(as_json):
        root, _ = workspace_root(repo)
        cfg = effective_config(root, trust_project, model=model, sandbox=sandbox, max_steps=max_steps, max_time=max_time,
                               endpoint=endpoint, api_key=api_key, **{"fix.test_command": test_command})
        outcome = run_review_command(root, cfg, ReviewRequest(base, github_pr, post), console)
    print_review(console, outcome)
    if as_json:
        typer.echo(json.dumps(outcome.to_json(), ensure_ascii=False))
    raise typer.Exit(int(outcome.exit_code))


@app.command("respond")
@signals_as_interrupts()
def respond_command(
    github_comment: str = typer.Option(..., "--github-comment", help="The comment's URL (issue comment, review comment or review)."),
    event_action: Optional[str] = typer.Option(None, "--event-action", help="The webhook's action (an 'edited' comment is ignored)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON result object on stdout (for CI bots)."),
    repo: Optional[Path] = RepoOpt,
    model: Optional[str] = ModelOpt,
    sandbox: Optional[str] = SandboxOpt,
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Most model turns per round."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Wall-clock budget of each round in seconds."),
    test_command: Optional[str] = typer.Option(None, "--test-command", help="Command that runs the tests ('none': no tests)."),
    author: Optional[str] = typer.Option(None, "--author", help="Commit author, 'Name <email>'."),
    remote: Optional[str] = typer.Option(None, "--remote", help="Git remote of the pull request's branch (default: origin)."),
    endpoint: Optional[str] = EndpointOpt,
    api_key: Optional[str] = ApiKeyOpt,
    trust_project: bool = TrustOpt,
) -> None:
    """Act on a trusted mention: one follow-up commit on the pull request's branch (never forced), and a reply.

    Exit codes: fix's (docs/ci.md); 0 also when the comment is ignored, 7 also when the branch moved."""
    from clovercode.front.respond.command import RespondRequest, print_respond, run_respond

    console = make_console(stderr=as_json)
    with one_json_error(as_json):
        root, _ = workspace_root(repo)
        cfg = effective_config(root, trust_project, model=model, sandbox=sandbox, max_steps=max_steps, max_time=max_time,
                               endpoint=endpoint, api_key=api_key,
                               **{"fix.test_command": test_command, "fix.remote": remote})
        outcome = run_respond(root, cfg, RespondRequest(github_comment, event_action, author), console)
    print_respond(console, outcome)
    if as_json:
        typer.echo(json.dumps(outcome.to_json(), ensure_ascii=False))
    raise typer.Exit(int(outcome.exit_code))

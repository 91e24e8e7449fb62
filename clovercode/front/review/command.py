"""Body of `clovercode review`: plan the range, run the review, post it, report.

Exit codes (docs/ci.md): 0 reviewed (with or without findings), 3 the model stopped without finishing,
5 model unavailable, 6 sandbox unavailable, 7 git/GitHub failure, 130 interrupted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rich.console import Console
from rich.markup import escape

from clovercode.agent.budget import StopReason
from clovercode.ground.config import Config
from clovercode.ground.errors import ExitCode, UsageError
from clovercode.github.client import GitHubClient
from clovercode.github.pulls import PullInfo, get_pull
from clovercode.github.refs import find_token, parse_issue
from clovercode.front.review.post import Placement, Posted, place, publish_review
from clovercode.front.review.run import Review, default_base, pull_base, review_range, run_review
from clovercode.ground.termination import exit_code
from clovercode.trust.terminal import inert
from clovercode.vcs.git import open_checkout


@dataclass(frozen=True)
class ReviewRequest:
    base: str | None = None
    github_pr: str | None = None
    post: bool = False


@dataclass
class ReviewOutcome:
    exit_code: ExitCode
    review: Review | None = None
    placement: Placement = field(default_factory=Placement)
    posted: Posted | None = None
    pull: PullInfo | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        review = self.review
        data: dict[str, Any] = {"status": "reviewed" if self.exit_code is ExitCode.OK else "error",
                                "exit_code": int(self.exit_code), "detail": self.detail}
        if review is not None:
            data.update(base=review.range.base, head=review.range.head, summary=review.result.summary,
                        findings=[dict(f.to_json(), placed="line" if f in self.placement.inline else "summary")
                                  for f in review.findings],
                        tests=[t.to_json() for t in (review.tools.runs if review.tools else [])],
                        notes=review.notes, steps=review.result.steps,
                        trajectory=str(review.trajectory) if review.trajectory else None)
        data["pull_request"] = str(self.pull.ref) if self.pull else None
        data["review"] = self.posted.to_json() if self.posted else None
        return data


def run_review_command(root: Path, cfg: Config, request: ReviewRequest, console: Console,
                       env: Mapping[str, str] | None = None) -> ReviewOutcome:
    env = os.environ if env is None else env
    if request.base and request.github_pr:
        raise UsageError("give --base or --github-pr, not both")
    if request.post and not request.github_pr:
        raise UsageError("--post publishes on a pull request: pass --github-pr OWNER/REPO#N")
    if request.github_pr and not find_token(env):
        raise UsageError("--github-pr needs a GitHub token in GITHUB_TOKEN or GH_TOKEN")
    checkout = open_checkout(root)
    if checkout is None:
        raise UsageError(f"{root} is not in a git repository: there is no change to review")
    pull, client = None, None
    if request.github_pr:
        client = GitHubClient(cfg["github.api_url"], find_token(env))
        pull = get_pull(client, parse_issue(request.github_pr, "--github-pr"))
        base_ref = pull_base(checkout, pull, cfg["fix.remote"], None)
    else:
        base_ref = request.base or default_base(checkout, cfg["fix.remote"])
    rng = review_range(checkout, base_ref)
    if not rng.diff.strip():
        return ReviewOutcome(ExitCode.NO_CHANGE, pull=pull, detail=f"nothing to review: HEAD has no change since {rng.base[:12]}")
    review = run_review(checkout.top, cfg, checkout, rng, pull, console, env)
    outcome = ReviewOutcome(ExitCode.OK, review, place(review.findings, rng.map), pull=pull, detail=review.result.detail)
    stop = review.result.stop
    if stop is StopReason.INTERRUPTED:
        outcome.exit_code = ExitCode(exit_code(review.result.signal))
    elif stop is StopReason.MODEL_ERROR:
        outcome.exit_code = ExitCode.MODEL_UNAVAILABLE
    elif stop is not StopReason.FINISHED:
        outcome.exit_code = ExitCode.GAVE_UP
    if request.post and client is not None and pull is not None and outcome.exit_code is ExitCode.OK:
        outcome.posted = publish_review(client, pull, outcome.placement, review.result.summary, cfg["github.bot_login"])
    return outcome


def print_review(console: Console, outcome: ReviewOutcome) -> None:
    def line(label: str, text: str) -> None:  # file names and titles are the model's: inert on the terminal
        console.print(f"[bold]{escape(inert(label, newlines=False))}:[/] {escape(inert(text))}", highlight=False, soft_wrap=True)

    console.print()
    line("Result", outcome.detail or outcome.exit_code.name.lower())
    review = outcome.review
    if review is None:
        return
    line("Reviewed", f"{review.range.base[:12]}..{review.range.head[:12]} ({len(review.range.map.files)} files changed)")
    for f in review.findings:
        where = "" if f in outcome.placement.inline else " (outside the diff: summary)"
        line(f"  {f.severity}", f"{f.file}:{f.start_line}-{f.end_line} {f.title}{where}")
    if not review.findings:
        line("Findings", "none")
    for note in review.notes:
        console.print(f"[yellow]note:[/] {escape(inert(note))}", highlight=False, soft_wrap=True)
    if outcome.posted:
        p = outcome.posted
        line("Posted", f"review {p.review_id} {p.action}: {p.comments_added} line comment(s) added, "
                       f"{p.comments_kept} already there")

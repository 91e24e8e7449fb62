"""Body of `clovercode respond --github-comment URL`: gate, branch, loop, one follow-up commit, reply.

Exit codes (docs/ci.md): 0 fixed, or the comment was ignored (not trusted, a bot, an edit, no
mention: one log line, nothing else); 1 the follow-up breaks tests; 3 gave up; 4 no change; 5 model;
6 sandbox; 7 git/GitHub, including a branch that moved during the run (nothing pushed, nothing lost);
8 the change touches CI definitions (not committed); 9 unverified; 130 interrupted.
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
from clovercode.ground.errors import CiChangeRefused, ExitCode, UsageError, VcsError
from clovercode.fixflow.changes import TestedTree
from clovercode.fixflow.cigate import ci_changes, refuse_ci_changes
from clovercode.fixflow.plan import push_credentials, resolve_tests
from clovercode.fixflow.rounds import Rounds, run_rounds
from clovercode.fixflow.cleanrun import CleanRun, judge_clean, skipped
from clovercode.fixflow.verdict import FIXED, REGRESSED, UNVERIFIED, conclude
from clovercode.github.client import GitHubClient
from clovercode.github.commentref import CommentRef, parse_comment_url
from clovercode.github.pulls import Comment, PullInfo, get_comment, get_pull, issue_is_pull, list_issue_comments
from clovercode.github.refs import find_token, without_secrets
from clovercode.front.respond.gate import refusal
from clovercode.front.respond.reply import commit_message, post_reply, reply_body
from clovercode.front.respond.task import follow_up_task
from clovercode.wiring.session import open_session
from clovercode.ground.termination import exit_code
from clovercode.trust import gitsafe
from clovercode.trust.terminal import inert
from clovercode.ui.render import ConsoleRenderer
from clovercode.vcs.followup import (BranchMoved, FollowUp, check_out_branch, commit_follow_up, keep_on_side_branch,
                                     push_follow_up, remote_tip)
from clovercode.vcs.branches import valid_branch_name
from clovercode.vcs.git import DEFAULT_AUTHOR, open_checkout, parse_author

CODES = {FIXED: ExitCode.OK, REGRESSED: ExitCode.TESTS_FAILED, UNVERIFIED: ExitCode.UNVERIFIED}


@dataclass(frozen=True)
class RespondRequest:
    comment_url: str
    action: str | None = None  # the webhook's action (created, edited, submitted …)
    author: str | None = None


@dataclass
class RespondOutcome:
    exit_code: ExitCode
    status: str  # ignored | fixed | tests_failed | unverified | no_change | gave_up | refused | error …
    detail: str = ""
    comment: Comment | None = None
    pull: PullInfo | None = None
    branch: str | None = None
    commit: str | None = None
    pushed: bool = False
    reply_url: str | None = None
    outcome: str | None = None  # the verdict: fixed / regressed / unverified
    summary: str | None = None
    changed: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # changed, but deliberately not committed (with why)
    kept_on: str | None = None  # the branch a refused follow-up was pushed to instead
    clean: CleanRun | None = None  # the follow-up's tests in a clean checkout (fixflow/cleanrun.py)

    def to_json(self) -> dict[str, Any]:
        c = self.comment
        return {"status": self.status, "exit_code": int(self.exit_code), "detail": self.detail,
                "comment": {"id": c.id, "kind": c.kind, "author": c.login, "association": c.association} if c else None,
                "pull_request": str(self.pull.ref) if self.pull else None, "branch": self.branch, "commit": self.commit,
                "pushed": self.pushed, "verdict": self.outcome, "summary": self.summary, "changed_files": self.changed, "not_committed": self.left_out,
                "kept_on": self.kept_on, "reply": self.reply_url,
                "clean_checkout": self.clean.to_json() if self.clean else None}


def run_respond(root: Path, cfg: Config, request: RespondRequest, console: Console,
                env: Mapping[str, str] | None = None) -> RespondOutcome:
    env = os.environ if env is None else env
    ref = parse_comment_url(request.comment_url)
    token = find_token(env)
    if not token:
        raise UsageError("respond needs a GitHub token in GITHUB_TOKEN or GH_TOKEN")
    client = GitHubClient(cfg["github.api_url"], token)
    comment = get_comment(client, ref.issue.repo, ref.kind, ref.id, ref.issue.number)
    why = refusal(comment, bot_login=cfg["github.bot_login"], mention=cfg["github.mention"],
                  trusted=cfg["github.trusted_associations"], action=request.action)
    if why is not None:
        # the login comes from GitHub: inert on the terminal like any text from outside
        console.print(f"clovercode respond: comment {comment.id}: {escape(inert(why, newlines=False))}",
                      highlight=False, soft_wrap=True)
        return RespondOutcome(ExitCode.OK, "ignored", why, comment)
    if ref.kind == "issue_comment" and not ref.on_pull and not issue_is_pull(client, ref.issue):
        return _fix_issue(root, cfg, ref, comment, client, console, env)
    pull = get_pull(client, ref.issue)
    for name in (pull.head_ref, pull.base_ref):  # names from the API end up in git's argv and refspecs
        if not valid_branch_name(name):
            raise VcsError(f"{pull.ref}: GitHub named a branch {inert(name, newlines=False)!r}, which is not a valid git branch name")
    if pull.from_fork:
        raise VcsError(f"{pull.ref} comes from the fork {pull.head_repo or '(deleted)'}: clovercode pushes only to "
                       "branches of this repository", hint="Ask the author to apply the change, or open a branch here.")
    return _follow_up(root, cfg, request, ref, comment, pull, client, console, env)


def _fix_issue(root: Path, cfg: Config, ref: CommentRef, comment: Comment, client: GitHubClient, console: Console,
               env: Mapping[str, str]) -> RespondOutcome:
    """A mention on an issue without a pull request: what `fix --pr` does, then a reply there."""
    from clovercode.front.fixcmd import run_fix
    from clovercode.fixflow.plan import FixRequest

    fixed = run_fix(root, cfg, FixRequest(github_issue=str(ref.issue), push=True, pr=True), console, env)
    outcome = RespondOutcome(fixed.exit_code, fixed.status, fixed.result.detail, comment, branch=fixed.branch,
                             commit=fixed.commit, pushed=bool(fixed.pushed), summary=fixed.summary)
    if fixed.pull is not None:
        text = f"Opened {fixed.pull.url} ({fixed.conclusion.outcome}: {fixed.conclusion.reason})."
        outcome.reply_url = post_reply(client, ref.issue, comment, text).url
    return outcome


def _follow_up(root: Path, cfg: Config, request: RespondRequest, ref: CommentRef, comment: Comment, pull: PullInfo,
               client: GitHubClient, console: Console, env: Mapping[str, str]) -> RespondOutcome:
    checkout = open_checkout(root)
    if checkout is None:
        raise UsageError(f"{root} is not in a git repository: respond needs a checkout of {pull.ref.repo}")
    remote = cfg["fix.remote"]
    url = checkout.remote_url(remote)  # a clear error now if there is no such remote
    for note in filter(None, (f"pushing to {remote} at {gitsafe.shown_url(url)}", checkout.credentials_note())):
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    push_env = _push_env(root, cfg, checkout, remote, env)
    follow = check_out_branch(checkout, remote, pull.head_ref, push_env)
    diff = _pull_diff(checkout, remote, pull, push_env)
    thread = list_issue_comments(client, pull.ref) if comment.kind == "issue_comment" else []
    tests = resolve_tests(checkout.top, cfg)
    task = follow_up_task(pull, comment, thread, diff, tests.command if tests else None)
    cfg = cfg.with_overrides({"approval": "full-auto"}, "respond (always full-auto)")
    session = open_session(checkout.top, cfg, interactive=False, env=env)
    session.command_env = without_secrets(env)

    tested = TestedTree(checkout, follow.start)
    from clovercode.front.fixoutcome import CleanSetup

    clean = CleanSetup(session.executor, session.command_env, cfg["fix.test_timeout"], None, cfg["fix.verify_clean"],
                       console)

    def has_changes(result) -> bool:  # run_rounds asks right before each test run
        return tested.before_tests(result.changed)

    try:
        rounds = run_rounds(session, task, tests, cfg["fix.test_rounds"], cfg["fix.test_timeout"], ConsoleRenderer(console),
                            console, has_changes, baseline=cfg["fix.baseline"], issue_text=comment.body,
                            after_baseline=tested.after_baseline, after_tests=tested.after_tests)
    finally:
        session.close()
    out = RespondOutcome(ExitCode.GAVE_UP, "gave_up", rounds.result.detail, comment, pull, follow.branch,
                         summary=rounds.summary, changed=list(rounds.result.changed))
    _finish(out, rounds, follow, checkout, cfg, request, tests, tested, clean, session.last_trajectory)
    if out.status != "interrupted":  # a cancelled job says nothing; any other end is told in the thread
        out.reply_url = post_reply(client, pull.ref, comment, reply_body(out)).url
    return out


def _finish(out: RespondOutcome, rounds: Rounds, follow: FollowUp, checkout, cfg: Config, request: RespondRequest,
            tests, tested: TestedTree, clean, trajectory: Path | None) -> None:
    stop = rounds.result.stop
    if stop is StopReason.INTERRUPTED:
        out.exit_code, out.status = ExitCode(exit_code(rounds.result.signal)), "interrupted"
        return
    if stop is StopReason.MODEL_ERROR:
        out.exit_code, out.status = ExitCode.MODEL_UNAVAILABLE, "model_error"
        return
    if not rounds.finished:
        return
    if not tested.now(rounds.result.changed):
        out.exit_code, out.status = ExitCode.NO_CHANGE, "no_change"
        return
    body = out.comment.body if out.comment else ""
    last = rounds.tests[-1] if rounds.tests else None
    concluded = conclude(rounds.baseline, last, body)
    changes, since = tested.to_commit(rounds.result.changed)
    if concluded.outcome == FIXED and tests is not None and last is not None:
        # "fixed" means the follow-up alone passes, as for fix: its tree tested in a clean checkout
        from clovercode.front.fixoutcome import verify_alone

        out.clean = (verify_alone(checkout, changes.tree, follow.start.base, tests, changes, tested, clean, trajectory)
                     if clean.enabled else skipped("fix.verify_clean is off"))
        concluded = judge_clean(concluded, last, rounds.baseline, out.clean, body)
    out.outcome = concluded.outcome
    out.exit_code = CODES[concluded.outcome]
    out.status = {FIXED: "fixed", REGRESSED: "tests_failed", UNVERIFIED: "unverified"}[concluded.outcome]
    out.changed = list(changes.paths)  # the commit's files, whoever wrote them
    out.left_out = [item.describe() for item in changes.left_out] + [f"{p} (changed after the last test run)" for p in since]
    try:
        refused = ci_changes(checkout.top, sorted({*changes.paths, *since}))
        if refused:
            raise refuse_ci_changes(refused)
        author = parse_author(request.author or cfg["fix.author"]) if (request.author or cfg["fix.author"]) else (
            checkout.identity() or DEFAULT_AUTHOR)
        message = commit_message(out, rounds, tests, concluded)
        out.commit = commit_follow_up(follow, changes, message, author, checkout.identity() or author)
        push_follow_up(follow, out.commit)
        out.pushed = True
    except BranchMoved as exc:
        out.exit_code, out.status, out.detail = exc.exit_code, "refused", str(exc)
        out.kept_on = keep_on_side_branch(follow, out.commit or "") if out.commit else None
        out.detail += (f"; the follow-up commit {out.commit[:12]} is on the new branch {out.kept_on} (and the local "
                       f"branch {follow.branch})" if out.kept_on else f" — {exc.hint}")
    except (VcsError, CiChangeRefused) as exc:
        out.exit_code, out.status, out.detail = exc.exit_code, "error", str(exc)


def _push_env(root: Path, cfg: Config, checkout, remote: str, env: Mapping[str, str]) -> dict[str, str]:
    if not cfg["fix.push_token"]:
        return {}
    from clovercode.fixflow.plan import GitPlan

    plan = GitPlan(checkout, None, "", DEFAULT_AUTHOR, DEFAULT_AUTHOR, remote)  # type: ignore[arg-type]
    return push_credentials(root, cfg, plan, env)


def _pull_diff(checkout, remote: str, pull: PullInfo, env: Mapping[str, str] | None) -> str:
    base = remote_tip(checkout, remote, pull.base_ref, env) if pull.base_ref else None
    if base is None:
        return "(the base branch could not be fetched: no diff)"
    # remote_tip deleted its temporary ref; the fetched objects stay for this diff
    merge_base = checkout.git("merge-base", base, "HEAD").strip()
    return checkout.git("diff", *gitsafe.DIFF_FLAGS, "--no-color", merge_base, "HEAD")


def print_respond(console: Console, out: RespondOutcome) -> None:
    def line(label: str, text: str) -> None:
        console.print(f"[bold]{label}:[/] {escape(inert(text))}", highlight=False, soft_wrap=True)

    if out.status == "ignored":
        return
    line("Result", f"{out.status} — {out.detail}")
    if out.commit:
        line("Commit", f"{out.commit[:12]} on {out.branch}" + (" (pushed)" if out.pushed else " (local only, not pushed)"))
    if out.reply_url:
        line("Reply", out.reply_url)

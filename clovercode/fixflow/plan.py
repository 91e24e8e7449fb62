"""Everything `fix` must know before the model runs, checked up front: a mistake in a flag, a missing
token or a dirty tree fails in a second, not after twenty minutes of model time."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from clovercode.ground.config import Config
from clovercode.ground.errors import UsageError, VcsError
from clovercode.fixflow.issue import Issue, choose_source, issue_from_file, issue_from_text
from clovercode.ground.taskinput import cut_to_limit
from clovercode.fixflow.testrun import TestCommand, configured_test_command, detect_test_command
from clovercode.github.api import default_branch, fetch_issue
from clovercode.github.client import GitHubClient
from clovercode.github.refs import (RepoRef, find_token, issue_reference, parse_issue, parse_repo, push_auth_env,
                                    repo_from_remote_url)
from clovercode.trust import gitsafe
from clovercode.vcs.branches import branch_name, existing_issue_branch, valid_branch_name
from clovercode.vcs.branchguard import BACKUP_PREFIX, INCOMING_PREFIX, Commit, dropped_commits, foreign, refusal_hint
from clovercode.vcs.git import DEFAULT_AUTHOR, Checkout, Start, open_checkout, parse_author


@dataclass(frozen=True)
class FixRequest:
    """The `fix` command line, less what lives in settings (remote, base, tests, author)."""

    issue_text: str | None = None
    issue_file: Path | None = None
    github_issue: str | None = None
    commit: bool = True
    push: bool = False
    pr: bool = False
    branch: str | None = None
    author: str | None = None
    github_repo: str | None = None
    draft: bool = False  # open the pull request as a draft even when the tests pass
    force: bool = False  # move the fix branch even if it holds commits clovercode did not make
    allow_ci_changes: bool = False  # let the model change CI definitions and hooks, and commit them
    notes: tuple[str, ...] = ()  # said before the plan's own notes (e.g. where the project root is)
    first: bool = False  # fix --attempts N --first: publish the first attempt that is fixed, stop the others


@dataclass
class GitPlan:
    checkout: Checkout
    start: Start
    branch: str
    author: tuple[str, str]
    committer: tuple[str, str]
    remote: str | None = None  # set when pushing
    remote_sha: str | None = None  # the branch on the remote before the push (the lease)
    remote_heads: dict[str, str] = field(default_factory=dict)  # the remote's branches that matter here
    push_env: dict[str, str] = field(default_factory=dict)  # credentials for the push (fix.push_token)
    branch_tip: str | None = None  # the local branch before the run (None: it is made new)
    discarded: list[Commit] = field(default_factory=list)  # others' commits --force drops from the branch


@dataclass
class PullPlan:
    client: GitHubClient
    target: RepoRef
    head: str  # 'branch', or 'owner:branch' for a fork
    base: str
    reference: str | None  # '#42' / 'owner/repo#42' when a GitHub issue is fixed


@dataclass
class Plan:
    issue: Issue
    tests: TestCommand | None
    git: GitPlan | None  # None: edit the working tree only (--no-commit, or not a git repository)
    pull: PullPlan | None
    notes: list[str]


def make_plan(root: Path, cfg: Config, request: FixRequest, env: Mapping[str, str]) -> Plan:
    notes: list[str] = list(request.notes) + list(cfg.declared.notes)  # e.g. project settings ignored (trust)
    publish = request.push or request.pr
    if publish and not request.commit:
        raise UsageError("--push and --pr need a commit; drop --no-commit")
    if request.pr and not find_token(env):
        raise UsageError("--pr needs a GitHub token in GITHUB_TOKEN or GH_TOKEN",
                         hint="In GitHub Actions: env: GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }} (see docs/ci.md).")
    client = None
    source = choose_source(request.issue_text, request.issue_file, request.github_issue)
    if source == "github":
        ref = parse_issue(request.github_issue or "")
        client = GitHubClient(cfg["github.api_url"], find_token(env))
        fetched = fetch_issue(client, ref)
        issue = Issue(fetched.title, cut_to_limit(fetched.body), ref, fetched.url)  # nobody here typed it: cut, not refused
    elif source == "file":
        issue = issue_from_file(request.issue_file)  # type: ignore[arg-type]
    else:
        issue = issue_from_text(request.issue_text or "")
    tests = resolve_tests(root, cfg)
    git = plan_git(root, cfg, request, issue, notes) if request.commit else None
    if git is not None and git.remote and cfg["fix.push_token"]:
        git.push_env = push_credentials(root, cfg, git, env)
    if git is not None:
        guard_branch(git, request.force, notes)
    if not request.commit:
        notes.append("--no-commit: the changes stay in the working tree (no branch, no commit)")
    pull = None
    if request.pr:
        assert git is not None
        pull = plan_pull(root, cfg, request, issue, git, client, env)
    return Plan(issue, tests, git, pull, notes)


def resolve_tests(root: Path, cfg: Config) -> TestCommand | None:
    configured = configured_test_command(cfg["fix.test_command"], cfg.sources.get("fix.test_command", "default"))
    return detect_test_command(root) if configured == "detect" else configured  # type: ignore[return-value]


def plan_git(root: Path, cfg: Config, request: FixRequest, issue: Issue, notes: list[str]) -> GitPlan | None:
    checkout = open_checkout(root)
    if checkout is None:
        if request.push or request.pr:
            raise UsageError(f"{root} is not in a git repository, so there is nothing to push",
                             hint="Run clovercode fix inside a git checkout, or drop --push/--pr.")
        notes.append("not a git repository: the changes stay in the working tree (no branch, no commit)")
        return None
    start = checkout.start()
    warning = checkout.credentials_note()
    if warning:
        notes.append(warning)
    remote = cfg["fix.remote"] if (request.push or request.pr) else None
    remote_heads: dict[str, str] = {}
    prefix = cfg["fix.branch_prefix"]
    if remote:
        # a UsageError now if the remote does not exist; the URL is shown because a repository's
        # config can no longer move it (insteadOf, pushurl are not followed), so this is where it goes
        notes.append(f"pushing to {remote} at {gitsafe.shown_url(checkout.remote_url(remote))}")
        patterns = [f"{prefix}{issue.number}*"] if issue.number is not None and not request.branch else []
        if issue.number is None and not request.branch:
            patterns.append(branch_name(prefix, issue.title))  # its remote copy is checked before it is replaced
        if request.branch:
            patterns.append(request.branch)
        if start.branch:
            patterns.append(start.branch)
        remote_heads = checkout.remote_heads(remote, *patterns) if patterns else {}
    branch = request.branch or ""
    if not branch and issue.number is not None:
        branch = existing_issue_branch(prefix, issue.number, [*checkout.local_branches(), *remote_heads]) or ""
    branch = branch or branch_name(prefix, issue.title, issue.number)
    if not valid_branch_name(branch):
        raise UsageError(f"'{branch}' is not a valid git branch name", hint="Pass --branch NAME or fix fix.branch_prefix.")
    if start.branch == branch:
        raise VcsError(f"you are on {branch}, the branch an earlier fix of this issue was committed on",
                       hint="Switch to the branch the fix should start from (e.g. git switch main) and run again.")
    author = _author(request, cfg, checkout)
    committer = checkout.identity() or author
    return GitPlan(checkout, start, branch, author, committer, remote, remote_heads.get(branch), remote_heads,
                   branch_tip=checkout.branch_tip(branch))


def guard_branch(git: GitPlan, force: bool, notes: list[str]) -> None:
    """Refuse (VcsError) to move a fix branch, here or on the remote, that holds commits clovercode did
    not make, unless ``force``; then the commits that will be dropped are named in a note."""
    checkout, tips = git.checkout, []
    if git.branch_tip:
        tips.append(git.branch_tip)
    if git.remote_sha and git.remote_sha != git.branch_tip:
        if checkout.resolve(git.remote_sha):
            tips.append(git.remote_sha)
        else:  # only on the remote (a fresh CI clone): fetch it to read its commits
            incoming = INCOMING_PREFIX + git.branch
            try:
                fetched = checkout.fetch_branch(git.remote or "", git.branch, incoming, git.push_env)
            finally:
                if checkout.ref_exists(incoming):
                    checkout.delete_ref(incoming)
            tips += [fetched] if fetched else []
    seen: dict[str, Commit] = {}
    for tip in tips:
        for commit in dropped_commits(checkout, tip, git.start.base, git.branch):
            seen.setdefault(commit.sha, commit)
    others = foreign(list(seen.values()))
    if not others:
        return
    where = "the branch" if git.remote_sha is None else f"the branch (here or on {git.remote})"
    listed = "; ".join(c.describe() for c in others[:5]) + (f"; and {len(others) - 5} more" if len(others) > 5 else "")
    count = f"{len(others)} commit{'s' if len(others) != 1 else ''}"
    if not force:
        raise VcsError(f"{where} {git.branch} holds {count} clovercode did not make: {listed}",
                       hint=refusal_hint(git.branch))
    git.discarded = others
    notes.append(f"--force: a committed fix drops {count} clovercode did not make from {git.branch}: {listed} "
                 f"(a backup ref under {BACKUP_PREFIX} keeps them)")


def push_credentials(root: Path, cfg: Config, git: GitPlan, env: Mapping[str, str]) -> dict[str, str]:
    token = find_token(env)
    if not token:
        raise UsageError("fix.push_token is on, but GITHUB_TOKEN / GH_TOKEN is not set")
    push_url = git.checkout.push_url(git.remote or "")
    credentials = push_auth_env(push_url, cfg["github.api_url"], token)
    if not credentials:
        raise UsageError(f"fix.push_token: the push URL of '{git.remote}' is not https on the GitHub host of "
                         f"github.api_url ({push_url})", hint="Turn fix.push_token off to push with git's own credentials.")
    return credentials


def _author(request: FixRequest, cfg: Config, checkout: Checkout) -> tuple[str, str]:
    if request.author:
        return parse_author(request.author, "--author")
    if cfg["fix.author"]:
        return parse_author(cfg["fix.author"], f"fix.author ({cfg.sources.get('fix.author')})")
    return checkout.identity() or DEFAULT_AUTHOR


def plan_pull(root: Path, cfg: Config, request: FixRequest, issue: Issue, git: GitPlan,
              client: GitHubClient | None, env: Mapping[str, str]) -> PullPlan:
    client = client or GitHubClient(cfg["github.api_url"], find_token(env))
    pushed_to = repo_from_remote_url(git.checkout.remote_url(git.remote or cfg["fix.remote"]))
    if request.github_repo or cfg["github.repo"]:
        target = parse_repo(request.github_repo or cfg["github.repo"],
                            "--github-repo" if request.github_repo else "github.repo")
    elif issue.ref is not None:
        target = issue.ref.repo
    elif pushed_to is not None:
        target = pushed_to
    else:
        raise UsageError("cannot tell which GitHub repository the pull request belongs in",
                         hint="Pass --github-repo OWNER/REPO (the remote's URL is not a GitHub URL).")
    head_owner = pushed_to.owner if pushed_to is not None else target.owner
    head = git.branch if head_owner.lower() == target.owner.lower() else f"{head_owner}:{git.branch}"
    base = cfg["fix.base"]
    if not base and git.start.branch in git.remote_heads:
        base = git.start.branch  # the branch the fix started from, when the remote has it
    base = base or default_branch(client, target)
    reference = issue_reference(issue.ref, target) if issue.ref is not None else None
    return PullPlan(client, target, head, base, reference)

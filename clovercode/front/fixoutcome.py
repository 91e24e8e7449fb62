"""What one `clovercode fix` run ends with (FixOutcome), and how it ends: the exit code, the commit, the
push and the pull request, and the summary printed. fixcmd.py runs the model; fixattempts.py runs several."""


from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from rich.console import Console
from rich.markup import escape

from clovercode.agent.budget import StopReason
from clovercode.agent.loop import RunResult, usage_json
from clovercode.ground.config import Config
from clovercode.ground.errors import CiChangeRefused, ExitCode, VcsError
from clovercode.executors.base import Executor
from clovercode.fixflow.cigate import ci_changes, refuse_ci_changes
from clovercode.fixflow.changes import TestedTree, pending_stats
from clovercode.fixflow.cleanrun import CleanRun, judge_clean, skipped, verify_commit
from clovercode.fixflow.issue import Issue
from clovercode.fixflow.plan import FixRequest, Plan
from clovercode.fixflow.report import change_text, commit_message, pull_body, subject, tests_line, verdict_lines
from clovercode.fixflow.rounds import Rounds, record_event, time_left
from clovercode.fixflow.testrun import TestCommand, TestRun
from clovercode.fixflow.verdict import FIXED, REGRESSED, UNVERIFIED, Conclusion, Verdict, conclude as judge, verdict
from clovercode.github.api import PullRequest, PullSpec, publish_pull
from clovercode.ground.termination import exit_code
from clovercode.vcs.branchguard import Commit, backup_ref
from clovercode.vcs.attempttrees import store_commit
from clovercode.vcs.changeset import ChangeSet
from clovercode.vcs.cleancheckout import environment_links
from clovercode.vcs.git import FileStat

STATUS = {ExitCode.OK: "fixed", ExitCode.TESTS_FAILED: "tests_failed", ExitCode.NO_CHANGE: "no_change",
          ExitCode.GAVE_UP: "gave_up", ExitCode.INTERRUPTED: "interrupted", ExitCode.MODEL_UNAVAILABLE: "model_error",
          ExitCode.SANDBOX_UNAVAILABLE: "sandbox_error", ExitCode.VCS_ERROR: "vcs_error",
          ExitCode.CI_CHANGE_REFUSED: "ci_change_refused",
          ExitCode.TERMINATED: "interrupted", ExitCode.HUNG_UP: "interrupted", ExitCode.UNVERIFIED: "unverified"}
OUTCOME_CODES = {FIXED: ExitCode.OK, REGRESSED: ExitCode.TESTS_FAILED, UNVERIFIED: ExitCode.UNVERIFIED}


@dataclass(frozen=True)
class CleanSetup:
    """What the clean-checkout check needs once the session is closed (fixflow/cleanrun.py)."""

    executor: Executor
    env: Mapping[str, str]
    timeout: float  # fix.test_timeout
    deadline: float | None  # --max-time's end (time.monotonic())
    enabled: bool  # fix.verify_clean
    console: Console


@dataclass
class FixOutcome:
    issue: Issue
    result: RunResult  # the loop's last run
    exit_code: ExitCode
    trajectory: Path | None
    steps: int = 0
    summary: str | None = None
    test_command: TestCommand | None = None
    tests: list[TestRun] = field(default_factory=list)
    branch: str | None = None
    base: str | None = None
    commit: str | None = None
    files: list[FileStat] = field(default_factory=list)
    diffstat: str = ""
    skipped: list[str] = field(default_factory=list)  # changed, but deliberately not committed
    refused: list[str] = field(default_factory=list)  # CI definitions and hooks that kept the change uncommitted
    pushed: str | None = None  # the remote the branch was pushed to
    pull: PullRequest | None = None
    error: str | None = None  # what failed after the model's work was safe
    notes: list[str] = field(default_factory=list)
    backups: list[str] = field(default_factory=list)  # refs keeping the tips a moved branch had
    discarded: list[Commit] = field(default_factory=list)  # others' commits --force dropped from the branch
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    usage_estimated: bool = False
    baseline: TestRun | None = None  # the tests before the model changed anything
    summaries: list[tuple[int, str]] = field(default_factory=list)  # every round's finish summary
    tests_note: str = ""  # why the change's tests did not run (to the end)
    clean: CleanRun | None = None  # the commit's tests in a clean checkout (fixflow/cleanrun.py)
    stage: str = ""  # what conclude() is doing, when it is not committing or publishing (for an interrupt)
    attempts: list[dict[str, Any]] = field(default_factory=list)  # fix --attempts N: every attempt (front/fixattempts.py)
    chosen: int | None = None  # the attempt whose commit was published (1-based)

    @property
    def verdict(self) -> Verdict | None:
        return verdict(self.baseline, self.tests[-1]) if self.tests else None

    @property
    def conclusion(self) -> Conclusion:
        issue_text = f"{self.issue.title}\n{self.issue.body}"
        if not self.tests and self.test_command is not None:  # a command exists: say why it did not judge
            return Conclusion(UNVERIFIED, self.tests_note or "the tests were not run after the change")
        working = judge(self.baseline, self.tests[-1] if self.tests else None, issue_text)
        return judge_clean(working, self.tests[-1] if self.tests else None, self.baseline, self.clean,
                           issue_text) if self.clean else working

    @property
    def status(self) -> str:
        return STATUS.get(self.exit_code, "error")

    @property
    def tests_passed(self) -> bool | None:
        return self.tests[-1].passed if self.tests else None

    def to_json(self) -> dict[str, Any]:
        result = self.result.to_json()
        result.update(steps=self.steps, summary=self.summary, seconds=round(self.seconds, 3),
                      usage=usage_json(self.prompt_tokens, self.completion_tokens, self.usage_estimated))
        return {"status": self.status, "exit_code": int(self.exit_code), **result,
                "issue": {"title": self.issue.title, "number": self.issue.number,
                          "repo": str(self.issue.ref.repo) if self.issue.ref else None, "url": self.issue.url or None},
                "tests": self.tests_json(),
                "branch": self.branch, "base": self.base, "commit": self.commit,
                "diffstat": [{"path": f.path, "added": f.added, "removed": f.removed} for f in self.files],
                "not_committed": self.skipped, "ci_changes_refused": self.refused, "pushed_to": self.pushed,
                "pull_request": self.pull.to_json() if self.pull else None, "error": self.error, "notes": self.notes,
                "branch_backups": self.backups,
                "discarded_commits": [{"sha": c.sha, "subject": c.subject} for c in self.discarded],
                "trajectory": str(self.trajectory) if self.trajectory else None,
                **({"attempts": self.attempts, "chosen": self.chosen} if self.attempts else {})}

    def tests_json(self) -> dict[str, Any]:
        judged, concluded = self.verdict, self.conclusion
        baseline = None
        if self.baseline is not None:
            baseline = {k: v for k, v in self.baseline.to_json().items() if k != "round"}
        return {"command": self.test_command.command if self.test_command else None,
                "source": self.test_command.source if self.test_command else None,
                "passed": self.tests_passed, "baseline": baseline, "outcome": concluded.outcome,
                "reason": concluded.reason, "issue_tests": list(concluded.named),
                "clean_checkout": self.clean.to_json() if self.clean else None,
                **(judged.to_json() if judged else {"fixed": [], "regressions": [], "still_failing": [],
                                                    "per_test": False, "regressed": False, "verdict": None, "note": None}),
                "runs": [t.to_json() for t in self.tests]}


def conclude(outcome: FixOutcome, rounds: Rounds, plan: Plan, request: FixRequest, cfg: Config,
             tested: TestedTree | None, clean: CleanSetup | None = None, private_ref: str | None = None) -> None:
    """Decide the exit code; commit, push and open the pull request when there is a finished change.
    ``private_ref``: an attempt of several (front/fixattempts.py): the commit goes to that ref only,
    nothing is pushed or published."""
    stop = rounds.result.stop
    if stop is StopReason.INTERRUPTED:  # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP
        outcome.exit_code = ExitCode(exit_code(rounds.result.signal))
    elif stop is StopReason.MODEL_ERROR:
        outcome.exit_code = ExitCode.MODEL_UNAVAILABLE
    elif not rounds.finished:
        outcome.exit_code = ExitCode.GAVE_UP
    elif not (now := tested.now(rounds.result.changed) if tested is not None else rounds.result.changed):
        outcome.exit_code = ExitCode.NO_CHANGE
        if isinstance(now, ChangeSet) and now.left_out:  # changed, but all of it is left out (an over-size file)
            outcome.skipped = [item.describe() for item in now.left_out]
            outcome.tests_note = outcome.tests_note or "the tests were not run: nothing the change made can be committed"
    else:
        # fixed only when a test shows it; pre-existing failures do not count against the change
        outcome.exit_code = OUTCOME_CODES[outcome.conclusion.outcome]
        if plan.git is not None:
            try:
                commit_fix(outcome, plan, tested, request.allow_ci_changes, clean, private_ref)
                if private_ref is None:
                    publish(outcome, plan, request, cfg)
            except (VcsError, CiChangeRefused) as exc:
                outcome.error = str(exc)
                outcome.exit_code = exc.exit_code
        return
    if outcome.result.changed:
        outcome.notes.append("nothing was committed: the model's unfinished changes are in the working tree")


def commit_fix(outcome: FixOutcome, plan: Plan, tested: TestedTree | None, allow_ci_changes: bool = False,
               clean: CleanSetup | None = None, private_ref: str | None = None) -> None:
    git = plan.git
    assert git is not None and tested is not None
    changes, since = tested.to_commit(outcome.result.changed)
    # "changed" is the change set from here on: a command's files too, not only the file tools'
    top, root = git.checkout.top, git.checkout.root  # changed_files stay project-relative (a monorepo's subproject)
    outcome.result = replace(outcome.result, changed=[Path(os.path.relpath(top / p, root)).as_posix() for p in changes.paths])
    outcome.skipped = [item.describe() for item in changes.left_out]
    if since:
        outcome.notes.append("changed after the last test run, so not committed (the commit is the tested tree): "
                             + ", ".join(since))
    # every path that differs, whoever wrote it, and the ones changed after the tests ran
    outcome.refused = [] if allow_ci_changes else ci_changes(git.checkout.top, sorted({*changes.paths, *since}))
    if outcome.refused:
        raise refuse_ci_changes(outcome.refused)
    if clean is not None:
        check_clean(outcome, plan, tested, changes, clean)
        outcome.exit_code = OUTCOME_CODES[outcome.conclusion.outcome]
    reference = plan.pull.reference if plan.pull else (str(plan.issue.ref) if plan.issue.ref else None)
    message = commit_message(plan.issue, outcome.summaries or outcome.summary, plan.tests, outcome.tests, reference,
                             outcome.verdict, outcome.conclusion, pending_stats(git.checkout, git.start.base, changes),
                             left_out=outcome.skipped)
    if private_ref is not None:  # an attempt: no branch, no index, no checkout of the user's moves
        outcome.commit = store_commit(git.checkout, git.start.base, changes.tree, message, git.author, git.committer,
                                      private_ref)
    else:
        outcome.commit, backup = git.checkout.commit_on_branch(git.start, git.branch, changes, message, git.author,
                                                              git.committer, git.branch_tip)
        if backup:
            outcome.backups.append(backup)
    outcome.branch, outcome.base = git.branch, git.start.base
    outcome.discarded = git.discarded
    outcome.files = git.checkout.diff_stat(git.start.base, outcome.commit)
    outcome.diffstat = git.checkout.diff_stat_text(git.start.base, outcome.commit)


def check_clean(outcome: FixOutcome, plan: Plan, tested: TestedTree, changes: ChangeSet, clean: CleanSetup) -> None:
    """A fix the working tree's tests call fixed is tested once more, as the commit alone (fixflow/cleanrun.py)."""
    git = plan.git
    if git is None or plan.tests is None or not outcome.tests or outcome.conclusion.outcome != FIXED:
        return  # nothing to reproduce: only a fix is checked
    if not clean.enabled:
        outcome.clean = skipped("fix.verify_clean is off")
        return
    outcome.stage = "testing the commit in a clean checkout"
    outcome.clean = verify_alone(git.checkout, changes.tree, git.start.base, plan.tests, changes, tested, clean,
                               outcome.trajectory)
    outcome.stage = ""


def verify_alone(checkout, tree: str, base: str, tests: TestCommand, changes: ChangeSet, tested: TestedTree,
               clean: CleanSetup, trajectory: Path | None) -> CleanRun:
    """``tree`` (the tested change on ``base``) in a clean checkout, said on the console and recorded:
    fix's and respond's one way to ask whether the commit alone passes."""
    left = {item.path for item in changes.left_out}
    missing = sorted((set(checkout.untracked()) - set(changes.paths)) | left)
    subdir = os.path.relpath(checkout.root, checkout.top)
    links = environment_links(checkout, [subdir] if subdir != "." else [], left | tested.ignored_written)
    clean.console.print(f"[bold]Testing the commit alone in a clean checkout:[/] {escape(tests.command)}",
                        highlight=False)
    run = verify_commit(checkout, tree, base, tests, clean.executor, time_left(clean.deadline, clean.timeout),
                        root=checkout.root, env=clean.env, links=links, missing=missing)
    passed = run.run is not None and run.run.passed
    clean.console.print(f"[{'green' if passed else 'yellow'}]clean checkout: {escape(run.describe())}[/]",
                        highlight=False, soft_wrap=True)
    record_event(trajectory, "clean_run", **run.to_json())
    return run


def publish(outcome: FixOutcome, plan: Plan, request: FixRequest, cfg: Config, extra: str = "") -> None:
    """Push the branch and open or update the pull request; ``extra`` ends its body (the attempts' table)."""
    git, pull = plan.git, plan.pull
    assert git is not None
    if git.remote:
        if git.remote_sha and git.remote_sha != git.branch_tip and git.checkout.resolve(git.remote_sha):
            outcome.backups.append(backup_ref(git.checkout, f"{git.remote}/{git.branch}", git.remote_sha))
        git.checkout.push(git.remote, git.branch, git.remote_sha, git.push_env)
        outcome.pushed = git.remote
    if pull is not None:
        body = pull_body(plan.issue, outcome.summaries or outcome.summary, plan.tests, outcome.tests, outcome.files,
                         pull.reference, cfg["model"] if not cfg["endpoint"] else cfg["endpoint"], outcome.steps,
                         outcome.verdict, outcome.conclusion, outcome.skipped,
                         outcome.clean.describe() if outcome.clean else None)
        body = f"{body.rstrip()}\n\n{extra}" if extra else body
        spec = PullSpec(pull.target, pull.head, pull.base, subject(plan.issue, outcome.conclusion), body,
                        draft=request.draft or outcome.exit_code is not ExitCode.OK)  # a draft unless fixed
        outcome.pull = publish_pull(pull.client, spec)


def print_summary(console: Console, outcome: FixOutcome) -> None:
    result = outcome.result

    def line(label: str, text: str) -> None:
        console.print(f"[bold]{label}:[/] {escape(text)}", highlight=False, soft_wrap=True)

    console.print()
    line("Result", f"{outcome.status} — {result.detail}")
    about = "~" if outcome.usage_estimated else ""  # estimated, not counted by the model's tokenizer
    line("Steps", f"{outcome.steps} · tokens {about}{outcome.prompt_tokens} in / {about}{outcome.completion_tokens} out"
                  f" · {outcome.seconds:.1f}s")
    line("Tests", tests_line(outcome.test_command, outcome.tests).removeprefix("Tests: "))
    if outcome.baseline is not None:
        line("Before the change", outcome.baseline.describe())
    for text in verdict_lines(outcome.verdict):
        console.print(f"  {escape(text)}", highlight=False, soft_wrap=True)
    if outcome.clean is not None:
        line("Clean checkout", outcome.clean.describe())
    if outcome.exit_code in OUTCOME_CODES.values() or outcome.tests_note:
        line("Outcome", f"{outcome.conclusion.outcome}: {outcome.conclusion.reason}")
    line("Changed", ", ".join(result.changed) if result.changed
         else "nothing that can be committed (see Not committed)" if outcome.skipped else "nothing")
    if outcome.commit:
        # the branch is named only here, once it is made: most runs that end without a change make none
        line("Commit", f"{outcome.commit[:12]} on branch {outcome.branch} (one commit on {outcome.base[:12] if outcome.base else '?'}"
             f"{', which was moved: backup kept' if outcome.backups else ', a new branch'})")
        if outcome.diffstat:
            console.print(escape(outcome.diffstat.rstrip("\n")), highlight=False, soft_wrap=True)
    if outcome.discarded:
        line("Discarded", f"{len(outcome.discarded)} commit(s) clovercode did not make, dropped from {outcome.branch} "
             f"by --force: " + "; ".join(c.describe() for c in outcome.discarded))
    if outcome.backups:
        line("Backup", ", ".join(outcome.backups) + " (the branch's old tip; git branch NAME REF restores it)")
    if outcome.skipped:
        line("Not committed", ", ".join(outcome.skipped))
    if outcome.pushed:
        line("Pushed", f"{outcome.branch} to {outcome.pushed}")
    if outcome.pull:
        kind = ", draft" if outcome.pull.draft else ""
        line("Pull request", f"#{outcome.pull.number} {outcome.pull.url} ({outcome.pull.action}{kind})")
    if outcome.summary:
        line("Summary", change_text(outcome.summaries or outcome.summary))
    if outcome.error:
        console.print(f"[red]error:[/] {escape(outcome.error)}", highlight=False, soft_wrap=True)
        if outcome.commit:
            console.print(f"Nothing is lost: the fix is committed on the local branch {outcome.branch}. Fix the "
                          "problem, switch back to the branch you started from and run again to push it and open "
                          "the pull request (the branch and pull request are updated, not duplicated).", highlight=False, soft_wrap=True)
    for note in outcome.notes:
        if note.startswith("nothing was committed"):
            console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    if outcome.trajectory:
        console.print(f"[dim]Trajectory: {outcome.trajectory}[/]", highlight=False, soft_wrap=True)

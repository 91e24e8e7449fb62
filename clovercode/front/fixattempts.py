"""``fix --attempts N``: N independent attempts of one issue, side by side, and the one the tests
prove best is published (docs/fix.md).

Each attempt works in a temporary worktree of the start commit (vcs/attempttrees.py) with its own
conversation, sampling seed, trajectory and test runs, and ends as a single fix ends: a verdict
(checked in a clean checkout when it says fixed) and a commit, kept under a private ref. The choice
is fixflow/attempts.py's. Only then is the user's repository touched: the chosen commit becomes the
fix branch, which is pushed and gets the pull request as a single fix's would.

Attempts run on threads. The model is shared as the subagents share it (subagents/models.py): the
embedded engine decodes every attempt's turns in one batch on this thread; an endpoint gets at most
N requests at a time; a replay model plays each attempt its own recording (fixflow/attempts.py
``replay_for``). A signal, ``--max-time`` or ``--first`` stops the attempts through one stop that
their model streams and commands obey; worktrees and private refs go on every way out.
"""

from __future__ import annotations

import io
import os
import secrets
import threading
import time
from concurrent import futures
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from rich.console import Console
from rich.markup import escape

from clovercode.agent.budget import StopReason
from clovercode.agent.events import MultiSink
from clovercode.agent.loop import RunResult
from clovercode.backends.registry import REPLAY_PREFIX, open_backend, replay_path
from clovercode.executors.base import with_project_read_only, with_readable, with_stop, with_writable
from clovercode.fixflow.attempts import attempt_settings, attempts_table, choose, replay_for, summary_lines, why_chosen
from clovercode.fixflow.changes import TestedTree
from clovercode.fixflow.plan import FixRequest, Plan
from clovercode.fixflow.rounds import record_event, run_rounds
from clovercode.front.fixoutcome import OUTCOME_CODES, CleanSetup, FixOutcome, conclude, print_summary, publish
from clovercode.github.refs import without_secrets
from clovercode.ground.attemptlog import RUN_PREFIX, attempt_trajectory
from clovercode.ground.config import Config
from clovercode.ground.events import EventSink
from clovercode.ground.errors import CiChangeRefused, ExitCode, VcsError
from clovercode.ground.termination import ENDING, exit_code, interrupt_detail
from clovercode.subagents.child import Progress
from clovercode.subagents.models import ChildModel, ChildStop, SharedModel
from clovercode.ui.render import ConsoleRenderer
from clovercode.vcs.attempttrees import AttemptTree, land, make_tree, remove_run_refs, remove_tree
from clovercode.vcs.cleancheckout import environment_links, held_signals
from clovercode.vcs.git import open_checkout
from clovercode.wiring.session import open_session, trajectory_dir

STOP_WAIT = 30.0  # seconds the attempts get to stop once told (their commands die within a second)


class TestSlots:
    """An executor whose commands each wait for one of a few slots: the attempts' test runs (baseline,
    rounds, clean checkout) run at most one per core at a time, so N suites never fight over the
    cores; the model's own commands are not held up."""

    __test__ = False

    def __init__(self, inner: Any, slots: threading.Semaphore):
        self.inner, self.slots, self.name = inner, slots, getattr(inner, "name", "executor")

    def run(self, *args: Any, **kwargs: Any) -> Any:
        with self.slots:
            return self.inner.run(*args, **kwargs)

    def with_writable(self, paths: Any) -> "TestSlots":
        return TestSlots(with_writable(self.inner, paths), self.slots)

    def with_project_read_only(self) -> "TestSlots":
        return TestSlots(with_project_read_only(self.inner), self.slots)

    def with_readable(self, paths: Any) -> "TestSlots":
        return TestSlots(with_readable(self.inner, paths), self.slots)

    def with_stop(self, stop: Any) -> "TestSlots":
        return TestSlots(with_stop(self.inner, stop), self.slots)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Told:
    """The attempts' events for a front end, heard one at a time from the attempts' threads (a
    renderer draws on one screen)."""

    def __init__(self, sink: EventSink | None):
        self.sink, self.lock = sink, threading.Lock()

    def emit(self, kind: str, **data: Any) -> None:
        if self.sink is not None:
            with self.lock:
                self.sink.emit(kind, **data)

    def progress(self, k: int, started: float) -> EventSink | None:
        """Attempt ``k``'s loop events as its row's progress (step, tokens as they stream, what it runs)."""
        if self.sink is None:
            return None

        def tell(kind: str, child_id: str = "", **data: Any) -> None:  # the subagents' Progress names its events
            self.emit("attempt_progress", attempt=k, **data)
        return Progress(tell, f"attempt-{k}", started)


@dataclass
class Attempt:
    k: int
    seed: int
    temperature: float
    model: str
    outcome: FixOutcome | None = None
    error: str = ""
    cancelled: str = ""  # stopped from outside (--first, a signal): why
    seconds: float = 0.0

    def entry(self) -> dict[str, Any]:
        """This attempt in the JSON result's ``attempts``."""
        o = self.outcome
        base = {"attempt": self.k, "seed": self.seed, "temperature": self.temperature, "model": self.model,
                "seconds": round(self.seconds, 3), "error": self.error or (o.error if o else None) or None}
        if o is None:
            return {**base, "status": "cancelled" if self.cancelled else "error", "exit_code": None,
                    "verdict": "cancelled" if self.cancelled else "error", "reason": self.cancelled or self.error,
                    "commit": None, "diff": None, "tests": None, "steps": 0,
                    "tokens": {"prompt": 0, "completion": 0}, "trajectory": None}
        judged = o.exit_code in OUTCOME_CODES.values()
        status = "cancelled" if self.cancelled and not o.commit else o.status
        tests = o.tests_json() if o.test_command is not None else None
        clean = tests.get("clean_checkout") if tests else None
        return {**base, "status": status, "exit_code": int(o.exit_code),
                "verdict": o.conclusion.outcome if judged else status,
                "reason": o.conclusion.reason if judged else (self.cancelled or o.result.detail),
                "commit": o.commit,
                "diff": {"files": len(o.files), "added": sum(f.added or 0 for f in o.files),
                         "removed": sum(f.removed or 0 for f in o.files)} if o.commit else None,
                "tests": {k: tests[k] for k in ("passed", "outcome", "fixed", "regressions", "still_failing")}
                         | {"clean_checkout": {"verified": clean["verified"], "passed": clean["passed"]} if clean else None}
                         if tests else None,
                "steps": o.steps, "tokens": {"prompt": o.prompt_tokens, "completion": o.completion_tokens},
                "trajectory": str(o.trajectory) if o.trajectory else None}


def run_attempts(root: Path, cfg: Config, request: FixRequest, plan: Plan, console: Console,
                 env: Mapping[str, str], deadline: float | None, backend: Any = None,
                 sink: EventSink | None = None) -> FixOutcome:
    """``backend``: a model already open (``clovercode bench attempts`` runs several sizes on one,
    the REPL its own); it stays open. Without one, the configured model is opened here and closed at
    the end. ``sink`` (the REPL's renderer) hears ``attempt_started``, ``attempt_progress`` and
    ``attempt_completed``: a row per attempt."""
    git = plan.git
    assert git is not None
    n, checkout, run = cfg["fix.attempts"], git.checkout, secrets.token_hex(4)
    first = request.first
    subdir = os.path.relpath(checkout.root, checkout.top)
    replay = None if cfg["endpoint"] or not cfg["model"].startswith(REPLAY_PREFIX) else replay_path(cfg["model"], root).resolve()
    own = backend is None and replay is None
    backend = open_backend(cfg, base_dir=root) if own else backend
    shared = None if replay is not None else SharedModel(backend, n)
    log = trajectory_dir(cfg, env) / f"{RUN_PREFIX}{time.strftime('%Y%m%dT%H%M%S')}-{run}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    stop = ChildStop()
    told = Told(sink)
    slots = threading.BoundedSemaphore(max(1, min(n, os.cpu_count() or 1)))  # test runs at once: one per core
    attempts = [Attempt(k, *attempt_settings(k, cfg["temperature"]),
                        f"replay:{replay_for(replay, k)}" if replay else cfg["model"] if not cfg["endpoint"] else cfg["endpoint"])
                for k in range(1, n + 1)]
    trees: list[AttemptTree] = []
    interrupt: KeyboardInterrupt | None = None
    started = time.monotonic()
    console.print(f"[bold]Running {n} attempts side by side[/] [dim](each in its own worktree; "
                  f"{'batched on one model' if shared and shared.batched else 'concurrently'})[/]", highlight=False)
    pool = futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="clovercode-attempt")
    running: list[futures.Future] = []
    timer: threading.Timer | None = None
    try:
        try:
            links = environment_links(checkout, [subdir] if subdir != "." else [], ())
            for attempt in attempts:
                trees.append(make_tree(checkout, git.start, run, attempt.k, links))
            finished, left, lock = threading.Event(), [n], threading.Lock()

            def ended(_: futures.Future) -> None:
                with lock:
                    left[0] -= 1
                    if not left[0]:
                        finished.set()
            for attempt, tree in zip(attempts, trees):
                record_event(log, "attempt_started", attempt=attempt.k, of=n, seed=attempt.seed,
                             temperature=attempt.temperature, model=attempt.model, worktree=str(tree.top), ref=tree.ref,
                             trajectory=str(attempt_trajectory(log, attempt.k)))
                told.emit("attempt_started", attempt=attempt.k, of=n, seed=attempt.seed, temperature=attempt.temperature)
                future = pool.submit(_attempt, attempt, tree, subdir, plan, request, cfg, env, deadline, stop, shared,
                                     console, log, first, n, slots, told)
                future.add_done_callback(ended)
                running.append(future)
            if deadline is not None:  # --max-time: the attempts' threads have no SIGALRM of their own
                timer = threading.Timer(max(deadline - time.monotonic(), 0.0), stop.set,
                                        ("max_time", f"reached the time limit ({cfg['max_time']:g} s)"))
                timer.daemon = True
                timer.start()
            if shared is not None and shared.batched:
                shared.drive(finished)  # the attempts' turns, one batch, on the thread that loaded the model
            else:
                while not finished.wait(0.05):
                    ENDING.check()  # a signal whose interrupt was lost acts here
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: every attempt stops, nothing is published
            ENDING.deliver()
            interrupt = exc
            stop.set("cancelled", interrupt_detail(exc))
            if shared is not None:
                shared.close()
            futures.wait(running, timeout=STOP_WAIT)
        finally:
            if timer is not None:
                timer.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
            if shared is not None:
                shared.close()
            if own:
                backend.close()
        entries = [a.entry() for a in attempts]
        outcome = _final(attempts, entries, plan, request, cfg, console, interrupt, n, time.monotonic() - started)
        record_event(log, "fix_result", **outcome.to_json())
    finally:
        with held_signals():  # the clean-up is never cut half way
            for tree in trees:
                remove_tree(checkout, tree)
            try:
                remove_run_refs(checkout, run)
            except VcsError:
                pass
    outcome.notes.append(f"the attempts' events: {log}")
    print_summary(console, outcome)
    console.print("[bold]Attempts:[/]", highlight=False)
    for line in summary_lines(outcome.attempts, outcome.chosen):
        console.print(f"  {escape(line)}", highlight=False, soft_wrap=True)
    for said in outcome.notes:
        if said not in plan.notes:  # the choice, and where the attempts' events are
            console.print(f"[bold]note:[/] {escape(said)}", highlight=False, soft_wrap=True)
    return outcome


def _attempt(attempt: Attempt, tree: AttemptTree, subdir: str, plan: Plan, request: FixRequest, cfg: Config,
             env: Mapping[str, str], deadline: float | None, stop: ChildStop, shared: SharedModel | None,
             console: Console, log: Path, first: bool, n: int, slots: threading.Semaphore, told: "Told") -> None:
    """One attempt, on its own thread, start to verdict; never raises (what went wrong is its report)."""
    started = time.monotonic()
    quiet = Console(file=io.StringIO(), width=120)  # N attempts' output interleaved would say nothing
    label = f"attempt {attempt.k}"
    try:
        where = (tree.top / subdir) if subdir != "." else tree.top
        work = open_checkout(where)
        if work is None:
            raise VcsError(f"the attempt's worktree {tree.top} is not a git checkout")
        start = work.start()
        git = replace(plan.git, checkout=work, start=start, branch=tree.ref, remote=None, remote_sha=None,
                      remote_heads={}, branch_tip=None, discarded=[])
        mine = replace(plan, git=git, notes=[])
        cfg_k = cfg.with_overrides({"temperature": attempt.temperature}, f"fix.attempts ({label})")
        if shared is None:  # a replay: this attempt's own recording, from its start
            from clovercode.backends.replay import ReplayBackend

            inner = ReplayBackend(Path(attempt.model[len(REPLAY_PREFIX):]))
            model: Any = ChildModel(inner, stop, inner.generate, label)
        else:
            model = shared.for_child(label, stop)
        tested = TestedTree(work, start)
        session = open_session(where, cfg_k, interactive=False, env=env, backend=model)
        session.seed = attempt.seed
        session.next_trajectory = attempt_trajectory(log, attempt.k)  # nested under the run's events file
        session.checkpoints = False  # the worktree goes at the end; its checkpoints would be the user's undo list
        session.command_env = without_secrets(env)
        # the toolchain the worktree links to (the user's .venv, node_modules) is seen, never written
        shown = [os.path.realpath(tree.top / rel) for rel in tree.links]
        session.executor = with_stop(with_readable(session.executor, [Path(p) for p in shown]), stop)
        if request.allow_ci_changes:
            session.allow_ci_changes()
        tests_run = TestSlots(session.executor, slots)

        def has_changes(result: RunResult) -> bool:
            return tested.before_tests(result.changed)
        try:
            rounds = run_rounds(session, plan.issue.task(plan.tests.command if plan.tests else None), plan.tests,
                                cfg["fix.test_rounds"], cfg["fix.test_timeout"], MultiSink(ConsoleRenderer(quiet), told.progress(attempt.k, started)), quiet,
                                has_changes, baseline=cfg["fix.baseline"],
                                issue_text=f"{plan.issue.title}\n{plan.issue.body}", after_baseline=tested.after_baseline,
                                after_tests=tested.after_tests, deadline=deadline, test_executor=tests_run)
        finally:
            session.close()
        outcome = FixOutcome(plan.issue, rounds.result, ExitCode.GAVE_UP, session.last_trajectory, rounds.steps,
                             rounds.summary, plan.tests, rounds.tests, prompt_tokens=rounds.prompt_tokens,
                             completion_tokens=rounds.completion_tokens, seconds=rounds.seconds, baseline=rounds.baseline,
                             summaries=rounds.summaries, usage_estimated=rounds.usage_estimated, tests_note=rounds.tests_note)
        attempt.outcome = outcome
        if not stop.is_set():
            clean = CleanSetup(tests_run, session.command_env, cfg["fix.test_timeout"], deadline,
                               cfg["fix.verify_clean"], quiet)
            conclude(outcome, rounds, mine, request, cfg_k, tested, clean, private_ref=tree.ref)
        elif stop.reason == "max_time":  # the run's --max-time: the attempt ran out of time, as a single fix does
            outcome.result = replace(rounds.result, stop=StopReason.MAX_TIME, detail=stop.detail)
        elif rounds.result.stop is StopReason.INTERRUPTED:
            outcome.exit_code = ExitCode.INTERRUPTED
        if outcome.trajectory is not None:
            record_event(outcome.trajectory, "fix_result", attempt=attempt.k, **outcome.to_json())
    except KeyboardInterrupt as exc:  # stopped while committing or in its clean check
        attempt.error = interrupt_detail(exc)
    except Exception as exc:  # one attempt's failure is its report, never the run's end
        attempt.error = f"{type(exc).__name__}: {exc}"
    attempt.seconds = time.monotonic() - started
    if stop.is_set() and stop.reason != "max_time" and not (attempt.outcome and attempt.outcome.exit_code is ExitCode.OK):
        attempt.cancelled = stop.detail
    entry = attempt.entry()
    record_event(log, "attempt_completed", **entry)
    if told.sink is not None:
        told.emit("attempt_completed", **entry)  # its row ends; the renderer says the verdict
    else:
        console.print(f"[dim]attempt {attempt.k} of {n}: {escape(str(entry['verdict']))} "
                      f"({escape(str(entry['reason'] or ''))[:160]})[/]", highlight=False, soft_wrap=True)
    if first and entry["verdict"] == "fixed" and entry["commit"]:
        stop.set("cancelled", f"--first: attempt {attempt.k} is fixed")


def _final(attempts: list[Attempt], entries: list[dict[str, Any]], plan: Plan, request: FixRequest, cfg: Config,
           console: Console, interrupt: KeyboardInterrupt | None, n: int, seconds: float) -> FixOutcome:
    """The run's one outcome: the chosen attempt's, landed on the fix branch and published."""
    git = plan.git
    assert git is not None
    chosen = None if interrupt is not None else choose(entries)
    if chosen is None:
        done = [a.outcome for a in attempts if a.outcome is not None]
        if interrupt is not None or not done:
            signum = getattr(interrupt, "signum", None)
            detail = (f"{interrupt_detail(interrupt)} while {n} attempts ran" if interrupt is not None
                      else "no attempt ended with a result")
            code = ExitCode(exit_code(signum)) if interrupt is not None else ExitCode.GAVE_UP
            outcome = FixOutcome(plan.issue, RunResult(StopReason.INTERRUPTED if interrupt else StopReason.MODEL_ERROR,
                                                       0, detail, signal=signum), code, None, test_command=plan.tests,
                                 notes=list(plan.notes))
            outcome.error = detail if interrupt is not None else "; ".join(a.error for a in attempts if a.error) or detail
        else:
            outcome = done[0]
            outcome.notes = [*plan.notes, f"none of the {n} attempts has a commit to publish"]
    else:
        attempt = attempts[chosen - 1]
        outcome = attempt.outcome
        assert outcome is not None and outcome.commit
        outcome.notes = [*plan.notes, f"chose attempt {chosen} of {n} ({why_chosen(entries, chosen)})"]
        try:
            backup, stayed = land(git.checkout, git.start, git.branch, outcome.commit, git.branch_tip)
            outcome.branch, outcome.base, outcome.discarded = git.branch, git.start.base, git.discarded
            outcome.backups = [backup] if backup else []
            if stayed:
                outcome.notes.append(f"the fix is on branch {git.branch}, but your checkout stayed where it was: {stayed}")
            publish(outcome, plan, request, cfg, attempts_table(entries, chosen))
        except (VcsError, CiChangeRefused) as exc:
            outcome.error, outcome.exit_code = str(exc), exc.exit_code
        except KeyboardInterrupt as exc:
            ENDING.deliver()
            outcome.exit_code = ExitCode(exit_code(getattr(exc, "signum", None)))
            outcome.error = f"{interrupt_detail(exc)} while {'pushing or opening the pull request' if outcome.branch else 'committing'}"
    outcome.attempts, outcome.chosen = entries, chosen
    outcome.steps = sum(a.outcome.steps for a in attempts if a.outcome)
    outcome.prompt_tokens = sum(a.outcome.prompt_tokens for a in attempts if a.outcome)
    outcome.completion_tokens = sum(a.outcome.completion_tokens for a in attempts if a.outcome)
    outcome.seconds = seconds
    return outcome

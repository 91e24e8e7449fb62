"""The eval's metrics, as pure functions of recorded attempts (trajectories + hidden-test results).

Definitions (docs/eval.md explains them for users):

* a **model turn is valid** when it holds at least one call, nothing failed to parse, and every
  call validated against its schema: the calls were right the first time;
* a **step failed** when its turn was invalid, or a call it ran failed (a failing command or test
  run, an edit not applied, a tool error), or it was the finish that fix's test run then failed;
  a **step succeeded** when its turn was valid and every call it ran (at least one besides
  ``finish``) succeeded; a finish-only step is neither;
* a failed step is **recovered** when one of the next R steps succeeded, R being the run's retry
  budget (``max_format_errors``, recorded in ``run_start``);
* an attempt is **completed** when its hidden tests pass; pass@k uses the unbiased estimator
  1 - C(n-c, k) / C(n, k) averaged over tasks;
* **best-of-N** (``eval --attempts N``) is the share of tasks whose chosen attempt (the one
  ``fix --attempts N`` would publish, chosen without the hidden tests) passes the hidden tests;
* step latency splits each step's wall time (``step_start`` to the next step or ``run_end``) into
  model time (inside the backend), tool time (inside the tools) and harness overhead (the rest).

Counts are exact (fractions); only the final rates are floats.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Iterable, Sequence

from clovercode.fixflow.attempts import choose, why_chosen

FAILURE_KINDS = ("invalid_call", "edit_not_applied", "tests_failed", "command_failed", "tool_error")
EDIT_TOOLS = {"edit_file", "write_file", "apply_patch"}
DEFAULT_RETRY_BUDGET = 3
# Keys of a model_turn's usage that the loop itself writes; any other numeric key is an engine extra
# (Usage.extra, e.g. time to first block), averaged over the turns that report it.
USAGE_KEYS = {"prompt_tokens", "completion_tokens", "forwards", "total_prompt_tokens", "total_completion_tokens"}
_TEST_COMMAND = re.compile(r"test|spec\b|\bcheck\b", re.IGNORECASE)


@dataclass(frozen=True)
class Step:
    step: int
    valid: bool
    failures: tuple[str, ...]  # failure kinds, in order; empty when the step did not fail
    success: bool
    seconds: float
    model_seconds: float
    tool_seconds: float
    first_token_seconds: float | None = None
    completion_tokens: int = 0
    forwards: int | None = None
    engine_seconds: float | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    @property
    def overhead_seconds(self) -> float:
        return max(0.0, self.seconds - self.model_seconds - self.tool_seconds)


def is_test_command(command: str) -> bool:
    """Heuristic: a command that runs tests (pytest, unittest, node --test, go test, make check...)."""
    return bool(_TEST_COMMAND.search(command))


def steps_from_events(events: Sequence[dict[str, Any]]) -> list[Step]:
    """The steps of a trajectory, over all of its runs (fix's test rounds continue a task in a new
    run); steps without a model turn (the model failed) are left out.

    A step ends at the next ``step_start`` or ``run_end``. A failing ``test_run`` after a run (fix
    runs the tests once the model calls finish) marks that run's last step failed: finishing did
    not make the tests pass.
    """
    steps: list[Step] = []
    group: list[dict[str, Any]] = []

    def close(at: float) -> None:
        step = _step(group, at) if group else None
        if step is not None:
            steps.append(step)
        group.clear()

    last_run_step: int | None = None  # index in ``steps`` of the last step of the run that just ended
    for event in events:
        kind = event.get("kind")
        if kind == "step_start":
            close(float(event["t"]))
            group.append(event)
        elif kind == "run_end":
            close(float(event.get("t", 0.0)))
            # fix also runs the tests once after a feedback round that did not finish, to record the
            # final state; only a finish can be "sent back"
            finished = event.get("stop_reason") == "finished"
            last_run_step = len(steps) - 1 if steps and finished else None
        elif kind == "test_run":
            if last_run_step is not None and not event.get("passed"):
                failed = steps[last_run_step]
                steps[last_run_step] = replace(failed, failures=failed.failures + ("tests_failed",), success=False)
            last_run_step = None
        elif group:
            group.append(event)
    if group:
        close(float(group[-1].get("t", group[0]["t"])))
    return steps


def _step(group: list[dict[str, Any]], finished_at: float) -> Step | None:
    start = group[0]
    turn = next((e for e in group if e.get("kind") == "model_turn"), None)
    if turn is None:
        return None
    calls = turn.get("calls") or []
    valid = bool(calls) and not turn.get("errors") and all(c.get("valid") for c in calls)
    commands = {e["id"]: e for e in group if e.get("kind") == "tool_call"}
    failures = [] if valid else ["invalid_call"]
    ran = ok = 0
    tool_seconds = 0.0
    for obs in (e for e in group if e.get("kind") == "observation" and e.get("id") in commands):
        ran += 1
        tool_seconds += float(obs.get("seconds") or 0.0)
        if obs.get("ok"):
            ok += 1
        else:
            failures.append(_failure_kind(obs.get("name", ""), commands[obs["id"]].get("arguments") or {}))
    usage = turn.get("usage") or {}
    timing = turn.get("timing") or {}
    model_seconds = float(timing.get("model_seconds", turn.get("seconds") or 0.0))
    seconds = finished_at - float(start["t"])
    return Step(
        step=int(start.get("step", 0)), valid=valid, failures=tuple(failures),
        success=valid and ran > 0 and ok == ran, seconds=max(seconds, 0.0), model_seconds=model_seconds,
        tool_seconds=tool_seconds, first_token_seconds=timing.get("first_token_seconds"),
        completion_tokens=int(usage.get("completion_tokens") or 0), forwards=usage.get("forwards"),
        engine_seconds=timing.get("engine_seconds"),
        extra={k: float(v) for k, v in usage.items()
               if k not in USAGE_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)})


def _failure_kind(tool: str, arguments: dict[str, Any]) -> str:
    if tool in EDIT_TOOLS:
        return "edit_not_applied"
    if tool == "run_command":
        return "tests_failed" if is_test_command(str(arguments.get("command", ""))) else "command_failed"
    return "tool_error"


def retry_budget(events: Sequence[dict[str, Any]]) -> int:
    start = next((e for e in events if e.get("kind") == "run_start"), {})
    return int((start.get("limits") or {}).get("max_format_errors") or DEFAULT_RETRY_BUDGET)


def recovered_flags(steps: Sequence[Step], budget: int) -> list[bool | None]:
    """For each step: None when it did not fail, else whether a step within ``budget`` after it succeeded."""
    flags: list[bool | None] = []
    for index, step in enumerate(steps):
        if not step.failed:
            flags.append(None)
        else:
            flags.append(any(s.success for s in steps[index + 1:index + 1 + budget]))
    return flags


# --- aggregation ---------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def distribution(values: Sequence[float]) -> dict[str, Any]:
    return {"n": len(values), "median": _r(percentile(values, 50)), "p95": _r(percentile(values, 95))}


def pass_at_k(n: int, c: int, k: int) -> Fraction:
    """Unbiased pass@k from n attempts with c passing (Chen et al. 2021)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} attempts, got {n}")
    if n - c < k:
        return Fraction(1)
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def rate(part: int, whole: int) -> float | None:
    return float(Fraction(part, whole)) if whole else None


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def counted(attempts: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Attempts that count: everything but those cut short by the user."""
    return [a for a in attempts if a.get("status") != "interrupted"]


def summarize(attempts: Sequence[dict[str, Any]], k: int = 1) -> dict[str, Any]:
    """Every metric over ``attempts`` (dicts as in the results file); interrupted ones are ignored."""
    attempts = counted(attempts)
    turns = valid = failed = recovered = 0
    by_kind = {kind: [0, 0] for kind in FAILURE_KINDS}
    step_times: dict[str, list[float]] = {"total": [], "model": [], "tool": [], "overhead": [], "first_token": []}
    tokens = forwards = tokens_with_forwards = 0
    engine_tokens, engine_seconds, model_seconds = 0, 0.0, 0.0
    extras: dict[str, list[float]] = {}
    for attempt in attempts:
        events = attempt.get("trajectory") or []
        steps = steps_from_events(events)
        for step, flag in zip(steps, recovered_flags(steps, retry_budget(events))):
            turns += 1
            valid += step.valid
            if flag is not None:
                failed += 1
                recovered += flag
                for kind in dict.fromkeys(step.failures):
                    by_kind[kind][0] += 1
                    by_kind[kind][1] += flag
            step_times["total"].append(step.seconds)
            step_times["model"].append(step.model_seconds)
            step_times["tool"].append(step.tool_seconds)
            step_times["overhead"].append(step.overhead_seconds)
            if step.first_token_seconds is not None:
                step_times["first_token"].append(step.first_token_seconds)
            tokens += step.completion_tokens
            model_seconds += step.model_seconds
            if step.forwards:
                forwards += step.forwards
                tokens_with_forwards += step.completion_tokens
            if step.engine_seconds:
                engine_tokens += step.completion_tokens
                engine_seconds += step.engine_seconds
            for key, value in step.extra.items():
                extras.setdefault(key, []).append(value)
    return {
        "tasks": len({a["task"] for a in attempts}),
        "attempts": len(attempts),
        "errors": sum(1 for a in attempts if a.get("status") == "error"),
        "completion": completion(attempts, k),
        "validity": {"valid_turns": valid, "turns": turns, "rate": rate(valid, turns)},
        "recovery": {"recovered": recovered, "failed": failed, "rate": rate(recovered, failed),
                     "by_kind": {kind: {"failed": f, "recovered": r, "rate": rate(r, f)}
                                 for kind, (f, r) in by_kind.items() if f}},
        "latency": {"step": {name: distribution(values) for name, values in step_times.items()},
                    "task": distribution([float(a.get("seconds") or 0.0) for a in attempts])},
        "engine": {**engine_figures(tokens, model_seconds, engine_tokens, engine_seconds, tokens_with_forwards, forwards),
                   "extra": {key: _r(sum(values) / len(values)) for key, values in sorted(extras.items())}},
        "steps": distribution([float(a.get("steps") or 0) for a in attempts]),
        "stop_reasons": dict(sorted(Counter(a.get("stop_reason") or a.get("status") for a in attempts).items())),
    }


def completion(attempts: Sequence[dict[str, Any]], k: int) -> dict[str, Any]:
    per_task: dict[str, list[int]] = {}
    for attempt in attempts:
        tally = per_task.setdefault(attempt["task"], [0, 0])
        tally[0] += 1
        tally[1] += bool((attempt.get("hidden_tests") or {}).get("passed"))
    out: dict[str, Any] = {"passed": sum(c for _, c in per_task.values()), "attempts": sum(n for n, _ in per_task.values())}
    best = best_of_n(attempts)
    if best:
        chosen_passed = sum(b["passed"] for b in best.values())
        out.update({"best_of_n": float(Fraction(chosen_passed, len(best))), "best_of_n_passed": chosen_passed,
                    "best_of_n_tasks": len(best)})
    for kk in sorted({1, max(1, k)}):
        # a task cut short by Ctrl-C may have fewer than k attempts: the estimator needs n >= k
        eligible = [(n, c) for n, c in per_task.values() if n >= kk]
        value = sum((pass_at_k(n, c, kk) for n, c in eligible), Fraction(0)) / len(eligible) if eligible else None
        out[f"pass@{kk}"] = None if value is None else float(value)
        if kk > 1 and len(eligible) < len(per_task):
            out[f"pass@{kk}_tasks"] = len(eligible)
    return out


def best_of_n(attempts: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per task of an ``eval --attempts N`` run: the attempt ``fix --attempts`` would publish, chosen
    by the evidence fix has (its visible tests' verdict, then diff size, steps, number: fixflow/attempts.py),
    and whether that attempt passed the hidden tests. Empty for a run without attempts."""
    per_task: dict[str, list[dict[str, Any]]] = {}
    for attempt in attempts:
        if "attempt" in attempt:
            per_task.setdefault(attempt["task"], []).append(attempt)
    out = {}
    for task, mine in per_task.items():
        # "commit": an attempt with a change is one fix would commit; one without has nothing to publish
        entries = [{**a, "commit": bool((a.get("diff") or {}).get("files"))} for a in mine]
        chosen = choose(entries)
        picked = next((a for a in mine if a["attempt"] == chosen), None)
        out[task] = {"chosen": chosen, "why": why_chosen(entries, chosen) if chosen is not None else "no attempt changed anything",
                     "passed": bool(picked and (picked.get("hidden_tests") or {}).get("passed"))}
    return out


def engine_figures(tokens: int, model_seconds: float, engine_tokens: int, engine_seconds: float,
                   tokens_with_forwards: int, forwards: int) -> dict[str, Any]:
    """tokens/s from the backend's own timing when it reports one, else from the measured model time;
    tokens per forward pass only when the backend counts its forward passes (the embedded engine)."""
    if engine_seconds > 0:
        per_second, source = engine_tokens / engine_seconds, "backend"
    elif model_seconds > 0 and tokens:
        per_second, source = tokens / model_seconds, "measured"
    else:
        per_second, source = None, None
    return {"completion_tokens": tokens, "tokens_per_second": _r(per_second), "tokens_per_second_source": source,
            "forwards": forwards or None,
            "tokens_per_forward": float(Fraction(tokens_with_forwards, forwards)) if forwards else None}

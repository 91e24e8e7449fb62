"""Tables for people: the per-task table and summary of one run, and the comparison of two runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

Getter = Callable[[dict[str, Any]], Any]


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def secs(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def ratio(part: int, whole: int, value: float | None) -> str:
    return "—" if not whole else f"{part}/{whole} ({pct(value)})"


LANGUAGES = {"python": "py", "javascript": "js", "typescript": "ts", "unknown": "?"}


def task_table(data: dict[str, Any]) -> Table:
    table = Table(title=f"clovercode eval · {escape(data['suite']['name'])} · {escape(str(data['model']))}",
                  title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1),
                  collapse_padding=True, pad_edge=False)
    table.add_column("task", no_wrap=True)
    for name in ("lang", "kind"):
        table.add_column(name)
    for name in ("pass", "steps", "valid", "recov", "time"):
        table.add_column(name, justify="right", no_wrap=True)
    best_of = data.get("best_of")
    if best_of:
        table.add_column(f"best of {best_of}", no_wrap=True)
    table.add_column("stop")
    for task in data["tasks"]:
        m = task["metrics"]
        done = m["completion"]
        mark = "green" if done["passed"] == done["attempts"] and done["attempts"] else ("red" if not done["passed"] else "yellow")
        stops = ", ".join((f"{k}×{v}" if v > 1 else k).replace("_", " ") for k, v in m["stop_reasons"].items())
        rec = m["recovery"]
        best = [best_cell(task.get("best_of_n"))] if best_of else []
        table.add_row(escape(task["id"]), LANGUAGES.get(task["language"], task["language"]), task["kind"],
                      f"[{mark}]{done['passed']}/{done['attempts']}[/]", num(m["steps"]["median"], 0),
                      f"{m['validity']['valid_turns']}/{m['validity']['turns']}",
                      f"{rec['recovered']}/{rec['failed']}" if rec["failed"] else "—",
                      secs(m["latency"]["task"]["median"]), *best, escape(stops))
    return table


def best_cell(best: dict[str, Any] | None) -> str:
    """The chosen attempt and its hidden tests' verdict: ``#2 ✓``, ``#1 ✗``, ``none`` when no attempt changed anything."""
    if not best or best.get("chosen") is None:
        return "[red]none[/]"
    return f"[green]#{best['chosen']} ✓[/]" if best["passed"] else f"[red]#{best['chosen']} ✗[/]"


def summary_lines(data: dict[str, Any]) -> list[str]:
    s = data["summary"]
    done, valid, rec = s["completion"], s["validity"], s["recovery"]
    k = data.get("repeats", 1)
    passes = f"pass@1 {pct(done['pass@1'])}" + (f" · pass@{k} {pct(done.get(f'pass@{k}'))}" if k > 1 else "")
    if data.get("best_of") and "best_of_n" in done:
        passes += (f" · best-of-{data['best_of']} {pct(done['best_of_n'])} ({done['best_of_n_passed']}/"
                   f"{done['best_of_n_tasks']} tasks: the attempt fix would publish passed)")
    lines = [f"[bold]Completion[/]    {passes} · {done['passed']}/{done['attempts']} attempts passed the hidden tests"
             f" ({s['tasks']} tasks{', ' + str(s['errors']) + ' errors' if s['errors'] else ''})",
             f"[bold]Valid calls[/]   {ratio(valid['valid_turns'], valid['turns'], valid['rate'])} model turns right the first time",
             f"[bold]Recovery[/]      {ratio(rec['recovered'], rec['failed'], rec['rate'])} failed steps recovered"]
    if rec["by_kind"]:
        lines.append("              " + " · ".join(f"{kind.replace('_', ' ')} {v['recovered']}/{v['failed']}"
                                                 for kind, v in rec["by_kind"].items()))
    step = s["latency"]["step"]
    lines.append("[bold]Step latency[/]  median / p95: " + " · ".join(
        f"{name} {secs(step[key]['median'])} / {secs(step[key]['p95'])}"
        for name, key in (("total", "total"), ("model", "model"), ("tools", "tool"), ("harness", "overhead"))))
    if step["first_token"]["n"]:
        first = step["first_token"]
        lines.append(f"              first token median {secs(first['median'])} / p95 {secs(first['p95'])}")
    task = s["latency"]["task"]
    lines.append(f"[bold]Task latency[/]  median {secs(task['median'])} · p95 {secs(task['p95'])}"
                 f" · steps median {num(s['steps']['median'], 0)} · p95 {num(s['steps']['p95'], 1)}")
    eng = s["engine"]
    per_second = eng["tokens_per_second"]
    if str(data.get("model", "")).startswith("replay:") and eng["tokens_per_second_source"] == "measured":
        per_second = None  # a replay "generates" instantly: its speed says nothing
    engine = f"tokens/s {num(per_second, 1)}"
    if per_second is not None and eng["tokens_per_second_source"]:
        engine += f" ({eng['tokens_per_second_source']})"
    if eng["tokens_per_forward"]:
        engine += f" · tokens per forward {num(eng['tokens_per_forward'])}"
    else:
        engine += " · tokens per forward — (not reported by this backend)"
    lines.append(f"[bold]Engine[/]        {engine} · {eng['completion_tokens']} completion tokens")
    if eng.get("extra"):
        lines.append("              mean per turn: " + " · ".join(f"{escape(k)} {v:g}" for k, v in eng["extra"].items()))
    lines.append("[bold]Stops[/]         " + ", ".join(f"{k} {v}" for k, v in s["stop_reasons"].items()))
    return lines


def print_report(console: Console, data: dict[str, Any]) -> None:
    console.print(task_table(data))
    for line in summary_lines(data):
        console.print(line, highlight=False, soft_wrap=True)
    if data.get("interrupted"):
        console.print(f"[yellow]Interrupted: these are the results of the {len(data['tasks'])} tasks gathered so far.[/]")


# --- comparison ----------------------------------------------------------------------------------

HIGHER, LOWER = 1, -1
METRICS: list[tuple[str, Getter, int, Callable[[Any], str]]] = [
    ("pass@1", lambda s: s["completion"]["pass@1"], HIGHER, pct),
    ("best-of-N", lambda s: s["completion"].get("best_of_n"), HIGHER, pct),
    ("valid calls", lambda s: s["validity"]["rate"], HIGHER, pct),
    ("recovery", lambda s: s["recovery"]["rate"], HIGHER, pct),
    ("step latency median", lambda s: s["latency"]["step"]["total"]["median"], LOWER, secs),
    ("step latency p95", lambda s: s["latency"]["step"]["total"]["p95"], LOWER, secs),
    ("model time median", lambda s: s["latency"]["step"]["model"]["median"], LOWER, secs),
    ("tool time median", lambda s: s["latency"]["step"]["tool"]["median"], LOWER, secs),
    ("harness overhead median", lambda s: s["latency"]["step"]["overhead"]["median"], LOWER, secs),
    ("task latency median", lambda s: s["latency"]["task"]["median"], LOWER, secs),
    ("task latency p95", lambda s: s["latency"]["task"]["p95"], LOWER, secs),
    ("tokens/s", lambda s: s["engine"]["tokens_per_second"], HIGHER, lambda v: num(v, 1)),
    ("tokens per forward", lambda s: s["engine"]["tokens_per_forward"], HIGHER, num),
]


@dataclass
class Comparison:
    rows: list[tuple[str, str, str, str, int]] = field(default_factory=list)  # name, a, b, delta, +1 better / -1 worse / 0
    regressions: list[str] = field(default_factory=list)  # tasks whose pass rate fell
    improvements: list[str] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def compare(a: dict[str, Any], b: dict[str, Any]) -> Comparison:
    out = Comparison()
    sa, sb = a["summary"], b["summary"]
    metrics = list(METRICS)
    k = min(a.get("repeats", 1), b.get("repeats", 1))
    if k > 1:
        metrics.insert(1, (f"pass@{k}", lambda s, k=k: s["completion"].get(f"pass@{k}"), HIGHER, pct))
    for name, get, better, fmt in metrics:
        va, vb = _get(get, sa), _get(get, sb)
        if va is None and vb is None:
            continue
        delta, verdict = "—", 0
        if va is not None and vb is not None:
            diff = vb - va
            delta = ("+" if diff >= 0 else "-") + fmt(abs(diff)).lstrip("+")
            verdict = 0 if abs(diff) < 1e-12 else (better if diff > 0 else -better)
        out.rows.append((name, fmt(va), fmt(vb), delta, verdict))
    rates_a = {t["id"]: _pass_rate(t) for t in a["tasks"]}
    rates_b = {t["id"]: _pass_rate(t) for t in b["tasks"]}
    for task in rates_a:
        if task not in rates_b:
            out.only_a.append(task)
        elif rates_b[task] < rates_a[task]:
            out.regressions.append(task)
        elif rates_b[task] > rates_a[task]:
            out.improvements.append(task)
    out.only_b = [t for t in rates_b if t not in rates_a]
    if a["suite"].get("source") != b["suite"].get("source"):
        out.notes.append(f"different suites: {a['suite'].get('source')} vs {b['suite'].get('source')}")
    if a.get("machine", {}).get("platform") != b.get("machine", {}).get("platform") or \
            a.get("machine", {}).get("gpus") != b.get("machine", {}).get("gpus"):
        out.notes.append("different machines: latency figures are not directly comparable")
    for label, data in (("A", a), ("B", b)):
        if not data.get("complete", True):
            out.notes.append(f"{label} is incomplete (interrupted): only the tasks it reached are compared")
    return out


def _get(get: Getter, summary: dict[str, Any]) -> Any:
    try:
        return get(summary)
    except (KeyError, TypeError):
        return None


def _pass_rate(task: dict[str, Any]) -> float:
    done = task["metrics"]["completion"]
    return done["passed"] / done["attempts"] if done["attempts"] else 0.0


def print_comparison(console: Console, a: dict[str, Any], b: dict[str, Any], names: tuple[str, str]) -> Comparison:
    result = compare(a, b)
    table = Table(title="clovercode eval compare", title_justify="left", header_style="bold")
    table.add_column("metric")
    table.add_column(f"A: {escape(names[0])}", justify="right")
    table.add_column(f"B: {escape(names[1])}", justify="right")
    table.add_column("B − A", justify="right")
    for name, va, vb, delta, verdict in result.rows:
        style = {1: "green", -1: "red"}.get(verdict, "")
        table.add_row(name, va, vb, f"[{style}]{delta}[/]" if style else delta)
    console.print(table)
    console.print(f"A: {escape(str(a['model']))} · B: {escape(str(b['model']))}", highlight=False)
    for label, tasks, style in (("Regressions (pass rate fell)", result.regressions, "red"),
                                ("Improvements (pass rate rose)", result.improvements, "green"),
                                ("Only in A", result.only_a, "dim"), ("Only in B", result.only_b, "dim")):
        if tasks:
            console.print(f"[{style}]{label}:[/] " + ", ".join(escape(t) for t in tasks), highlight=False, soft_wrap=True)
    if not result.regressions and not result.improvements:
        console.print("No task changed its pass rate.")
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    return result

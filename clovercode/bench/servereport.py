"""``clovercode bench serve``'s report, as a table and the lines under it (bench/serve.py measures)."""

from __future__ import annotations

from typing import Any


def print_report(report: dict[str, Any], console: Any) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    if console.width < 108:  # a pipe or a narrow terminal: eleven numeric columns need the room
        console = Console(width=108, file=console.file, force_terminal=console.is_terminal, highlight=False)

    shape = "turns of one conversation" if report.get("conversations") else "requests"
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=f"clovercode serve under load — model {report['model']}, {report['clients']} clients × "
                  f"{report['requests_per_client']} {shape}, {report['max_tokens']} tokens each")
    for column in ("mode", "done", "req/s", "tok/s", "p50 s", "p95 s", "TTFT p50", "batch", "cached", "req/s ×", "p95 ×"):
        table.add_column(column, justify="left" if column == "mode" else "right", no_wrap=True)
    for row in report["modes"]:
        table.add_row(row["mode"], f"{row['completed']}/{row['requests']}", _fmt(row["requests_per_s"], 1),
                      _fmt(row["tokens_per_s"], 0), _fmt(row["latency_p50_s"], 3), _fmt(row["latency_p95_s"], 3),
                      _fmt(row["first_token_p50_s"], 3), _fmt(row["mean_batch"], 1), _share(row),
                      _fmt(row["throughput_vs_one_at_a_time"], 2), _fmt(row["p95_latency_vs_one_at_a_time"], 2))
    console.print(table)
    for row in report["modes"]:
        problems = []
        if row["lost"]:
            problems.append(f"{row['lost']} lost ({'; '.join(row['errors'])})")
        if row["mixed_up"]:
            problems.append(f"{row['mixed_up']} replies differ from the one-at-a-time reply to the same prompt")
        killed = row["killed_client"]
        if killed is not None:
            problems.append(f"killed client cancelled after {killed['noticed_within_s']} s" if killed["cancelled"]
                            else "the killed client's request finished before the kill (nothing to cancel)"
                            if killed.get("finished_before_kill") else "killed client was NOT cancelled")
        console.print(f"{row['mode']}: " + ("; ".join(problems) if problems else "all requests answered, none mixed up"),
                      highlight=False)
    fb = report.get("forward_bound")
    if fb:
        samples = ", ".join(f"{s['moment']} {s['bound']:.2f}×" for s in fb.get("samples", []))
        console.print(f"forward cost, measured between the modes (median of {len(fb.get('samples', []))}): one forward "
                      f"over {fb['rows']} rows of {fb['block']} tokens {fb['batched_forward_ms']:.2f} ms, one row alone "
                      f"{fb['one_row_forward_ms']:.2f} ms ({fb['step_cost_vs_one_row']:.2f}×): batching can be at most "
                      f"{fb['bound']:.2f}× as fast here, before admissions and host work ({samples})", highlight=False)
        batched = next((row for row in report["modes"] if row["mode"] == "batched"), None)
        gain, around = (batched or {}).get("throughput_vs_one_at_a_time"), fb.get("around_batched") or []
        if gain and around and gain > max(around) * 1.1:
            console.print(f"the batched gain ({gain:.2f}×) exceeds the bound measured around it ({max(around):.2f}×): "
                          "the baseline ran under different load, or the one-by-one mode is held back by more than "
                          "forwards (HTTP, admissions); compare the modes' tok/s, not only the ratio", highlight=False)
    batched = next((row for row in report["modes"] if row["mode"] == "batched"), None)
    if batched is not None and batched.get("pass_ms"):
        t = batched["pass_ms"]
        host = t["step"] - t["forward"] - t["grammar"]
        per_row = f" ({1e3 * host / batched['mean_batch']:.0f} µs a row)" if batched.get("mean_batch") else ""
        console.print(f"batched pass timeline, mean per pass: admission {t['admit']:.1f} ms, step {t['step']:.1f} ms "
                      f"(forward {t['forward']:.1f}, grammar masks {t['grammar']:.1f}, other host work "
                      f"{host:.1f}{per_row}), streaming hand-off {t['deliver']:.1f} ms"
                      + (f"; a request waited {batched['queue_wait_ms']:.1f} ms in the queue on average"
                         if batched.get("queue_wait_ms") is not None else ""), highlight=False)
    ceiling = report.get("batching_ceiling")
    if ceiling:
        console.print(f"batching's ceiling on this work: the one-by-one requests' {ceiling['passes']} passes in full "
                      f"batches at the bound's cost ({1e3 * ceiling['full_batch_forwards_s']:.0f} ms) and the batched "
                      f"prefills ({1e3 * ceiling['batched_prefill_s']:.0f} ms; one by one "
                      f"{1e3 * (ceiling['one_by_one_prefill_s'] or 0):.0f} ms), nothing else: at most "
                      f"{ceiling['gain']:.2f}× one-by-one ({ceiling['of_bound']:.2f} of the bound)", highlight=False)
    console.print("[green]OK[/]" if report["ok"] else "[red]FAILED[/]: see above")
    if report.get("batched_vs_bound") is not None:  # the last line (an agents run's own line follows it)
        console.print(f"batched vs bound: {report['batched_vs_bound']:.2f}", highlight=False)
    from clovercode.bench.serveagents import final_line

    if (line := final_line(report)) is not None:
        console.print(line, highlight=False)


def _share(row: dict[str, Any]) -> str:
    """The share of prompt tokens the server took from kept prompts (— when it reports none)."""
    if not row.get("cached_prompt_tokens") or not row.get("prompt_tokens"):
        return "—"
    return f"{100 * row['cached_prompt_tokens'] / row['prompt_tokens']:.0f}%"


def _fmt(value: Any, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"

"""The ``clovercode bench`` command group; registered on the main app by clovercode/front/cli.py, which
passes in its error-mapping group class and how a command finds its project and configuration."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from clovercode.ground.errors import UsageError
from clovercode.ui.console import make_console


def _sizes(text: str, most: int, what: str) -> tuple[int, ...]:
    """``--sizes``: whole numbers from 1 to ``most``, separated by commas."""
    try:
        counts = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--sizes: whole numbers separated by commas, not {text!r}") from None
    if not counts or min(counts) < 1 or max(counts) > most:
        raise UsageError(f"--sizes: between 1 and {most} {what}")
    return counts


def make_bench_app(base_group: type, project_root: Callable[[Optional[Path]], Path],
                   effective_config: Callable[..., Any]) -> typer.Typer:
    bench_app = typer.Typer(cls=base_group, help="Benchmarks: ratios measured side by side in one run.", no_args_is_help=True)

    @bench_app.command("sandbox")
    def bench_sandbox(sandbox: str = typer.Option("workspace-write", "--sandbox", help="Policy to measure."),
                      runs: int = typer.Option(30, "--runs", min=3, help="Runs per command and side.")) -> None:
        """Sandbox start overhead per command: bwrap vs a plain subprocess, as a ratio."""
        from clovercode.bench.sandbox import measure, report
        from clovercode.sandboxing.policy import PROFILES

        if sandbox not in PROFILES:
            raise UsageError(f"--sandbox: unknown policy '{sandbox}'", hint=f"Choose one of: {', '.join(PROFILES)}.")
        typer.echo(report(measure(sandbox, runs), sandbox, runs))

    @bench_app.command("startup")
    def bench_startup(runs: int = typer.Option(10, "--runs", min=1, help="Interleaved runs of each path.")) -> None:
        """Start-up: --version, exec --json's first event, acp's initialize and session/new answers, in real processes."""
        from clovercode.bench.startup import measure, report

        typer.echo(report(measure(runs)))

    @bench_app.command("serve")
    def bench_serve(
        model: str = typer.Option("tiny", "--model", "-m", help="Model spec each `clovercode serve` process loads."),
        clients: int = typer.Option(8, "--clients", min=1, help="Concurrent clients (simulated CI bots)."),
        requests: int = typer.Option(3, "--requests", min=1, help="Requests each client sends, one after another."),
        max_tokens: int = typer.Option(48, "--max-tokens", min=1, help="Tokens each request asks for."),
        as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
        bound: bool = typer.Option(False, "--bound", help="Also load the model here and measure what batching can gain "
                                   "at most on this machine (one forward over N rows against N one-row forwards), "
                                   "between the modes it bounds."),
        conversations: bool = typer.Option(False, "--conversations", help="Each client's requests are the turns of one "
                                           "conversation (each carries the last turn and its reply), as an agent's are."),
        agents: bool = typer.Option(False, "--agents", help="As many clients again that send tools (half tool_choice "
                                    "auto, half required), as agents do; ends with 'agents batched vs one-by-one'."),
    ) -> None:
        """Load-test `clovercode serve`: one-at-a-time vs queued vs batched, measured in one run."""
        from clovercode.bench.serve import run_bench
        from clovercode.bench.servereport import print_report

        report = run_bench(model, clients, requests, max_tokens, bound, conversations, agents)
        if as_json:
            typer.echo(json.dumps(report, indent=2))
        else:
            print_report(report, make_console())
        raise typer.Exit(0 if report["ok"] else 1)

    @bench_app.command("subagents")
    def bench_subagents(
        model: str = typer.Option("clover-tiny", "--model", "-m", help="Model the children share."),
        sizes: str = typer.Option("1,2,4,8", "--sizes", help="Numbers of children to measure, comma-separated."),
        repeats: int = typer.Option(2, "--repeats", min=1, help="Runs per size and mode (interleaved); the median counts."),
        max_steps: int = typer.Option(2, "--max-steps", min=1, help="Steps each child may take."),
        max_new_tokens: int = typer.Option(64, "--max-new-tokens", min=1, help="Tokens per turn."),
        as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    ) -> None:
        """Read-only subagents one after another vs batched in one turn: wall time, forwards per token."""
        from clovercode.backends.registry import open_backend
        from clovercode.bench.subagents import HEADER, final_line, run_bench

        counts = _sizes(sizes, 8, "children (the bench has 8 subtasks)")
        root = project_root(None)
        cfg = effective_config(root).with_overrides({"model": model, "endpoint": "", "max_new_tokens": max_new_tokens,
                                                     "context.map_tokens": 0, "subagents.max_parallel": max(counts)})
        backend = open_backend(cfg, base_dir=root)
        try:
            say = (lambda line: None) if as_json else typer.echo
            say(f"subagents bench: model {backend.name}, {max_steps} steps × {max_new_tokens} tokens per child, "
                f"{repeats} runs per size, sequential and batched interleaved")
            say(HEADER)
            report = run_bench(backend, cfg, counts, repeats, max_steps, say)
        finally:
            backend.close()
        if as_json:
            typer.echo(json.dumps(report, indent=2))
        else:
            typer.echo(final_line(report))
        raise typer.Exit(0 if report["ok"] else 1)

    @bench_app.command("attempts")
    def bench_attempts(
        model: str = typer.Option("clover-tiny", "--model", "-m", help="Model the attempts share."),
        sizes: str = typer.Option("1,2,4", "--sizes", help="Numbers of attempts to measure, comma-separated."),
        max_steps: int = typer.Option(2, "--max-steps", min=1, help="Steps each attempt may take."),
        max_new_tokens: int = typer.Option(64, "--max-new-tokens", min=1, help="Tokens per turn."),
        as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    ) -> None:
        """`fix --attempts N` on one recorded task for N = 1, 2, 4 on one model: wall time, forwards per token."""
        from clovercode.backends.registry import open_backend
        from clovercode.bench.attempts import HEADER, final_line, run_bench

        counts = _sizes(sizes, 16, "attempts (fix.attempts' range)")
        root = project_root(None)
        cfg = effective_config(root).with_overrides({"model": model, "endpoint": "", "max_new_tokens": max_new_tokens,
                                                     "max_steps": max_steps, "context.map_tokens": 0, "sandbox": "none",
                                                     "fix.test_command": f"{sys.executable} -m unittest -q",
                                                     "fix.test_rounds": 0, "fix.verify_clean": False})
        backend = open_backend(cfg, base_dir=root)
        try:
            say = (lambda line: None) if as_json else typer.echo
            say(f"attempts bench: model {backend.name}, {max_steps} steps × {max_new_tokens} tokens per attempt, "
                "the attempts' turns batched on one model")
            say(HEADER)
            report = run_bench(backend, cfg, counts, say)
        finally:
            backend.close()
        if as_json:
            typer.echo(json.dumps(report, indent=2))
        else:
            typer.echo(final_line(report))
        raise typer.Exit(0 if report["ok"] else 1)

    @bench_app.command("map")
    def bench_map(path: Optional[Path] = typer.Argument(None, help="Tree to map (default: a git copy of this Python's standard library)."),
                  tokens: int = typer.Option(2048, "--tokens", help="Map budget in tokens."),
                  jobs: int = typer.Option(0, "--jobs", help="Parser processes (0: one per core)."),
                  compare: Optional[Path] = typer.Option(None, "--compare", help="Another clovercode checkout to run in alternation (e.g. the last release).")) -> None:
        """`clovercode map` cold, warm and touched on one and four stdlibs (targets: cold ≤ 15 s, warm ≤ 0.5 s)."""
        from clovercode.bench.map import run_bench

        if path is not None and not path.is_dir():
            raise UsageError(f"not a directory: {path}")
        if compare is not None and not (compare / "clovercode" / "__init__.py").is_file():
            raise UsageError(f"--compare {compare}: not a clovercode checkout (no clovercode/__init__.py)")
        raise typer.Exit(run_bench(path, tokens, jobs, typer.echo, compare))

    @bench_app.command("engine")
    def bench_engine(
        model: str = typer.Option("clover-tiny", "--model", "-m", help="Model to measure (default: the tiny trained one)."),
        prompts: int = typer.Option(24, "--prompts", min=1, help="Held-out agent turns to decode."),
        block_size: int = typer.Option(0, "--block-size", min=0, help="Block size (0: the model's own)."),
        thresholds: str = typer.Option("0.95,0.9,0.8,0.7", "--thresholds", help="Comma-separated thresholds."),
        lengths: str = typer.Option("128,512,1024,2048", "--lengths", help="Prompt lengths for the prefix-cache table."),
        max_new_tokens: int = typer.Option(128, "--max-new-tokens", min=1),
        repeats: int = typer.Option(3, "--repeats", min=1, help="Runs per prompt and schedule; the fastest counts."),
        device: Optional[str] = typer.Option(None, "--device", help="Default: engine.device."),
        dtype: Optional[str] = typer.Option(None, "--dtype", help="Default: engine.dtype."),
        as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
        grammar: bool = typer.Option(True, "--grammar/--no-grammar", help="Also decode under the tool-call grammar."),
        roofline: bool = typer.Option(False, "--roofline", help="Instead: each pass of a Clover-width model against "
                                      "its floor (bytes / bandwidth, FLOPs / peak) and the operations it dispatches "
                                      "(docs/engine.md, Roofline). --model is not used."),
        quant: str = typer.Option("none", "--quant", help="With --roofline: weights modes, comma-separated "
                                  "(none, int8, int4, fp8: all of them is the issue's acceptance run; each quantized "
                                  "mode took minutes on 2 cores through today's per-expert loop)."),
        layers: int = typer.Option(2, "--layers", min=2, help="With --roofline: layers of the Clover-width model."),
    ) -> None:
        """Block diffusion vs the AR and one-token-per-pass baselines, and prefix-cache scaling."""
        if roofline:
            run_roofline(quant, layers, device, dtype, repeats, as_json)
            return
        from clovercode.bench.engine import BenchOptions, parse_floats, parse_ints, render_report, run_engine_bench

        cfg = effective_config(project_root(None))  # the engine settings every command that loads a model honours
        try:
            options = BenchOptions(model=model, prompts=prompts, block_size=block_size, thresholds=parse_floats(thresholds),
                                   lengths=parse_ints(lengths), max_new_tokens=max_new_tokens, repeats=repeats,
                                   device=device or cfg["engine.device"], dtype=dtype or cfg["engine.dtype"], grammar=grammar,
                                   trust_remote_code=cfg["engine.trust_remote_code"], cache_dir=cfg["engine.cache_dir"])
        except ValueError as exc:
            raise UsageError(f"bad --thresholds or --lengths: {exc}") from None
        console = make_console(stderr=as_json)
        if not sys.stdout.isatty():
            console.width = 132  # the table's ten columns, when piped into a file or a log
        report = run_engine_bench(options, console)
        if as_json:
            typer.echo(json.dumps(report, indent=2))
        else:
            render_report(report, console)

    return bench_app


def run_roofline(quant: str, layers: int, device: Optional[str], dtype: Optional[str], repeats: int,
                 as_json: bool) -> None:
    """``bench engine --roofline``: its report, or its lines ending with the two the issue reads."""
    from clovercode.bench.roofline import RooflineOptions, render, run

    modes = tuple(m.strip() for m in quant.split(",") if m.strip())
    if device in (None, "auto"):
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype in (None, "auto"):
        dtype = "bfloat16"
    try:
        options = RooflineOptions(layers=layers, modes=modes, device=device, dtype=dtype,
                                  repeats=min(repeats, 3))
    except ValueError as exc:
        raise UsageError(f"--roofline: {exc}") from None
    if options.dtype not in ("bfloat16", "float32", "float16") or options.device not in ("cpu", "cuda") \
            and not options.device.startswith("cuda:"):
        raise UsageError(f"--device {options.device} --dtype {options.dtype}: the roofline runs on cpu or cuda, "
                         "in bfloat16, float16 or float32")
    say = (lambda line: None) if as_json else (lambda line: typer.echo(line, err=True))
    report = run(options, say)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo("\n".join(render(report)))

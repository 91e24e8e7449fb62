"""The ``clovercode`` commands (on the app of front/app.py, which maps domain errors to exit codes)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from clovercode.bench.cli import make_bench_app
from clovercode.eval.cli import make_eval_app
from clovercode.front.app import (ApiKeyOpt, CloverGroup, EndpointOpt, EndpointStreamOpt, ModelOpt, RepoOpt,  # noqa: F401
                                  SandboxOpt, TrustOpt, _version, app, effective_config, project_root, report_error,
                                  save_crash_report, workspace_root)
from clovercode.front.jsonexit import exit_interrupted_early, silent_interrupt
from clovercode.ground.config import load_config
from clovercode.ground.errors import CloverError, ExitCode, UsageError
from clovercode.ground.termination import ENDING, answering, interrupt_behind, signals_as_interrupts
from clovercode.ui.console import make_console

QuantOpt = typer.Option(None, "--quantization", help="Embedded engine's weights: none, int8, int4, fp8 or auto "
                        "(engine.quantization; docs/engine.md, which card runs what).")

LAST_SESSION = "@last"  # --continue: the newest session of this project, no picker


@app.callback(invoke_without_command=True)
def main_callback(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    repo: Optional[Path] = RepoOpt,
    model: Optional[str] = ModelOpt,
    sandbox: Optional[str] = SandboxOpt,
    approval: Optional[str] = typer.Option(None, "--approval", help="suggest, auto-edit, full-auto, or plan "
                                           "(read only until you approve a plan; Shift+Tab cycles)."),
    endpoint: Optional[str] = EndpointOpt,
    api_key: Optional[str] = ApiKeyOpt,
    endpoint_stream: Optional[str] = EndpointStreamOpt,
    resume: Optional[str] = typer.Option(None, "--resume", metavar="[ID]",
                                         help="Continue a saved session of this project: a picker (piped: the newest), or the one with this ID."),
    any_project: bool = typer.Option(False, "--any-project", help="With --resume ID: allow another project's session."),
    last: bool = typer.Option(False, "--continue", "-c", help="Continue this project's last session."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Most model turns per task."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Wall-clock budget of each task in seconds."),
    task: Optional[str] = typer.Option(None, "--task", hidden=True),  # `clovercode "task"` (startargs.py)
) -> None:
    """Without a command: open the interactive REPL in the project directory; `clovercode "TASK"` opens
    it with TASK as the first message."""
    if ctx.invoked_subcommand is not None:
        if resume is not None or any_project or last:
            raise UsageError("--resume continues a session in the REPL; use it without a command")
        # These belong to the REPL; before a command they would be silently ignored.
        given = [f"--{name.replace('_', '-')}" for name, value in (("repo", repo), ("model", model), ("sandbox", sandbox),
                 ("approval", approval), ("endpoint", endpoint), ("api_key", api_key),
                 ("endpoint_stream", endpoint_stream), ("max_steps", max_steps), ("max_time", max_time)) if value is not None]
        if given:
            sub = ctx.invoked_subcommand
            raise UsageError(f"{', '.join(given)} before '{sub}' would be ignored: options before a command are the REPL's",
                             hint=f"Put them after the command's name; `clovercode {sub} --help` lists what it accepts.")
        return
    from clovercode.front.repl import run_repl

    if any_project and resume is None:
        raise UsageError("--any-project goes with --resume ID")
    if last and resume is not None:
        raise UsageError("--continue and --resume both pick a session: give one")
    ENDING.repeat_sigint = True  # Ctrl-C cancels a turn; the session goes on
    with signals_as_interrupts():  # SIGTERM/SIGHUP end the REPL as Ctrl-D would, without a traceback
        from clovercode.front.repl.trustask import trust_on_start

        root, moved = workspace_root(repo)
        console = make_console()
        cfg = trust_on_start(root, console, lambda trusted: effective_config(
            root, trusted, model=model, sandbox=sandbox, approval=approval, endpoint=endpoint, api_key=api_key,
            endpoint_stream=endpoint_stream, max_steps=max_steps, max_time=max_time))
        if moved:
            console.print(f"[yellow]note:[/] {escape(moved)}", highlight=False, soft_wrap=True)
        code = run_repl(root, cfg, console, resume=LAST_SESSION if last else resume, any_project=any_project,
                        first_task=task)
    raise typer.Exit(code)


@app.command()
@signals_as_interrupts()  # SIGTERM (how CI cancels a job) and SIGHUP end the run the way Ctrl-C does
def fix(
    issue: Optional[str] = typer.Argument(None, help="The issue to fix, as text (or use --issue-file / --github-issue)."),
    issue_file: Optional[Path] = typer.Option(None, "--issue-file", help="Read the issue from a file (first line: title)."),
    github_issue: Optional[str] = typer.Option(None, "--github-issue", help="Fetch the issue OWNER/REPO#N from GitHub."),
    repo: Optional[Path] = RepoOpt,
    model: Optional[str] = ModelOpt,
    sandbox: Optional[str] = SandboxOpt,
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Most model turns per round."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Wall-clock budget of each round in seconds."),
    test_command: Optional[str] = typer.Option(None, "--test-command", help="Command that runs the tests ('none': no tests)."),
    test_rounds: Optional[int] = typer.Option(None, "--test-rounds", help="Times failing tests go back to the model."),
    commit: bool = typer.Option(True, "--commit/--no-commit", help="Commit on a fix branch (default), or only edit the working tree."),
    branch: Optional[str] = typer.Option(None, "--branch", help="Branch name (default: clovercode/<number>-<slug>)."),
    force: bool = typer.Option(False, "--force", help="Move the fix branch even if it holds commits clovercode did not make (a backup ref keeps them)."),
    author: Optional[str] = typer.Option(None, "--author", help="Commit author, 'Name <email>'."),
    push: bool = typer.Option(False, "--push", help="Push the fix branch to the remote."),
    pr: bool = typer.Option(False, "--pr", help="Push and open (or update) a GitHub pull request."),
    draft: bool = typer.Option(False, "--draft", help="Open the pull request as a draft even when the tests pass."),
    remote: Optional[str] = typer.Option(None, "--remote", help="Git remote to push to (default: origin)."),
    base: Optional[str] = typer.Option(None, "--base", help="Branch the pull request targets."),
    github_repo: Optional[str] = typer.Option(None, "--github-repo", help="OWNER/REPO to open the pull request in."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON result object on stdout (for CI bots)."),
    endpoint: Optional[str] = EndpointOpt,
    api_key: Optional[str] = ApiKeyOpt,
    endpoint_stream: Optional[str] = EndpointStreamOpt,
    trust_project: bool = TrustOpt,
    allow_ci: bool = typer.Option(False, "--allow-ci-changes", help="Let the model change and commit CI definitions and git hooks."),
    quantization: Optional[str] = QuantOpt,
    attempts: Optional[int] = typer.Option(None, "--attempts", help="Independent attempts, side by side; the one the tests prove best is published (docs/fix.md)."),
    first: bool = typer.Option(False, "--first", help="With --attempts: publish the first attempt that is fixed and stop the others."),
) -> None:
    """Fix an issue unattended: branch, model + test loop, one commit, optionally push and a pull request.

    Exit codes: 0 fixed (a failing test passes now, none regressed), 1 tests regressed, 3 gave up, 4 no change,
    5 model, 6 sandbox, 7 git/GitHub, 8 CI files,
    9 unverified, 130 interrupted (143 SIGTERM, 129 SIGHUP) (docs/ci.md)."""
    try:  # imports inside: a signal while they load still ends in the one JSON object
        from clovercode.front.fixcmd import run_fix
        from clovercode.fixflow.plan import FixRequest

        console = make_console(stderr=as_json)
        root, moved = workspace_root(repo)
        cfg = effective_config(root, trust_project, model=model, sandbox=sandbox, max_steps=max_steps, max_time=max_time,
                               endpoint=endpoint, api_key=api_key, endpoint_stream=endpoint_stream,
                               **{"fix.test_command": test_command, "fix.test_rounds": test_rounds,
                                  "fix.remote": remote, "fix.base": base, "engine.quantization": quantization,
                                  "fix.attempts": attempts})
        if first and cfg["fix.attempts"] < 2:
            raise UsageError("--first needs --attempts N (N of 2 or more)", hint="e.g. clovercode fix --attempts 3 --first ISSUE")
        request = FixRequest(issue, issue_file, github_issue, commit, push or pr, pr, branch, author, github_repo, draft,
                             force=force, notes=(moved,) if moved else (), allow_ci_changes=allow_ci, first=first)
        outcome = run_fix(root, cfg, request, console)
    except CloverError as exc:
        if not as_json:
            raise
        report_error(exc)
        typer.echo(json.dumps({"status": "error", "exit_code": int(exc.exit_code), "error": str(exc)}))
        raise typer.Exit(int(exc.exit_code)) from None
    except Exception as exc:  # a bug: CloverGroup saves the traceback; a CI bot still gets its one object
        if as_json:
            typer.echo(json.dumps({"status": "error", "exit_code": int(ExitCode.INTERNAL),
                                   "error": f"internal error: {type(exc).__name__}: {exc}"}))
        raise
    if as_json:
        with answering(int(outcome.exit_code)):  # a signal now waits until the object is out
            typer.echo(json.dumps(outcome.to_json()))  # ASCII: any locale
    raise typer.Exit(int(outcome.exit_code))


@app.command("exec")
def exec_command(
    task: Optional[str] = typer.Argument(None, help="The task; '-' or nothing reads it from stdin (when it is not a terminal)."),
    repo: Optional[Path] = RepoOpt,
    model: Optional[str] = ModelOpt,
    sandbox: Optional[str] = SandboxOpt,
    approval: Optional[str] = typer.Option(None, "--approval", help="full-auto (default; commands in the sandbox), or "
                                           "suggest / auto-edit: what they would ask about is refused; plan: read only, the answer is a plan."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Most model turns."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Wall-clock budget in seconds."),
    as_json: bool = typer.Option(False, "--json", help="Stream the run's events as JSON Lines on stdout (docs/usage.md)."),
    deltas: bool = typer.Option(False, "--include-deltas", "--include-partial-messages",
                                help="With --json: also stream the model's text as it is written (model_text_delta events)."),
    endpoint: Optional[str] = EndpointOpt,
    api_key: Optional[str] = ApiKeyOpt,
    endpoint_stream: Optional[str] = EndpointStreamOpt,
    trust_project: bool = TrustOpt,
    resume: Optional[str] = typer.Option(None, "--resume", metavar="ID", help="Continue the saved session ID headless."),
    last: bool = typer.Option(False, "--last", help="Continue this project's last session headless."),
    quantization: Optional[str] = QuantOpt,
) -> None:
    """Run one task headless: no questions, no git needed, nothing committed; prints the final answer.

    Exit codes: 0 done, 2 usage, 3 gave up, 5 model, 6 sandbox, 130 interrupted (docs/usage.md)."""
    from clovercode.front.execcmd import exec_config, read_task, run_exec

    if deltas and not as_json:
        raise UsageError("--include-deltas needs --json", hint="The deltas are JSON events: clovercode exec --json --include-deltas TASK")
    if last and resume is not None:
        raise UsageError("--last and --resume both pick a session: give one")
    root = project_root(repo)
    text = read_task(task, sys.stdin)
    cfg = exec_config(effective_config(root, trust_project, model=model, sandbox=sandbox, max_steps=max_steps, max_time=max_time,
                                       endpoint=endpoint, api_key=api_key, endpoint_stream=endpoint_stream,
                                       **{"engine.quantization": quantization}), approval)
    with signals_as_interrupts():  # a cancelled CI job (SIGTERM) ends like Ctrl-C: run_completed, exit 143
        code = run_exec(root, cfg, text, as_json, sys.stdout, make_console(stderr=True), deltas=deltas,
                        resume="@latest" if last else resume)
    raise typer.Exit(code)


@app.command("acp")
def acp_command(
    model: Optional[str] = ModelOpt,
    sandbox: Optional[str] = SandboxOpt,
    approval: Optional[str] = typer.Option(None, "--approval", help="suggest, auto-edit, full-auto or plan; questions go to the editor."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Most model turns per prompt."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Wall-clock budget of each prompt in seconds."),
    endpoint: Optional[str] = EndpointOpt,
    api_key: Optional[str] = ApiKeyOpt,
    endpoint_stream: Optional[str] = EndpointStreamOpt,
    trust_project: bool = TrustOpt,
) -> None:
    """Serve editors (Zed, JetBrains, Neovim) over the Agent Client Protocol on stdio (docs/editors.md)."""
    from clovercode.front.acp.command import run_acp

    flags = {"model": model, "sandbox": sandbox, "approval": approval, "max_steps": max_steps, "max_time": max_time,
             "endpoint": endpoint, "api_key": api_key, "endpoint_stream": endpoint_stream}
    with signals_as_interrupts():  # the editor ends the agent with SIGTERM: running commands are killed as on Ctrl-C
        code = run_acp(flags, trust_project)
    raise typer.Exit(code)


@app.command("sessions")
def sessions_command(repo: Optional[Path] = RepoOpt,
                     all_projects: bool = typer.Option(False, "--all", help="Every project's sessions, not only this one's.")) -> None:
    """List saved sessions of this project, newest first: id, date, steps, first task (resume with --resume ID)."""
    from clovercode.wiring.session import trajectory_dir
    from clovercode.wiring.sessions import list_sessions, print_sessions

    root = project_root(repo)
    found = list_sessions(trajectory_dir(effective_config(root), os.environ), None if all_projects else root)
    console = make_console()
    if not found:
        console.print(f"no saved sessions for {root}" if not all_projects else "no saved sessions", highlight=False)
        return
    print_sessions(console, found)


ci_app = typer.Typer(cls=CloverGroup, help="Set up clovercode as a CI bot.", no_args_is_help=True)
app.add_typer(ci_app, name="ci")


@ci_app.command("init")
def ci_init(
    repo: Optional[Path] = RepoOpt,
    model_on: str = typer.Option("gpu-runner", "--model-on", help="gpu-runner (self-hosted, model in-process) or endpoint."),
    label: str = typer.Option("clovercode", "--label", help="Issue label that starts a fix."),
    command: str = typer.Option("/clovercode", "--command", help="Comment command that starts a fix."),
    runner: Optional[str] = typer.Option(None, "--runner", help="runs-on labels, comma-separated."),
    source: Optional[str] = typer.Option(None, "--source", help="Install clovercode from this pinned source: "
                                         "git+URL@COMMIT_SHA (or @VERSION_TAG), or a wheel path/URL."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing workflow file."),
    review: bool = typer.Option(False, "--review", help="Also write clovercode-review.yml: review each pull request."),
    respond: bool = typer.Option(False, "--respond", help="Also write clovercode-respond.yml: act on @mentions."),
    fix: Optional[bool] = typer.Option(None, "--fix/--no-fix", help="Write the fix workflow (default: yes, unless "
                                       "--review or --respond is given)."),
    mention: str = typer.Option("@clovercode", "--mention", help="The mention the respond workflow acts on."),
) -> None:
    """Write .github/workflows/clovercode.yml: fix issues on a label or a comment command (docs/ci.md);
    with --review and --respond, the review and respond workflows."""
    from clovercode.github.ci_init import run_ci_init

    fix = fix if fix is not None else not (review or respond)
    if not (fix or review or respond):
        raise UsageError("--no-fix leaves nothing to write: add --review or --respond")
    run_ci_init(project_root(repo), model_on, label, command, runner, source, force, make_console(),
                fix=fix, review=review, respond=respond, mention=mention)


@app.command()
def serve(
    model: Optional[str] = ModelOpt,
    host: Optional[str] = typer.Option(None, "--host", help="Address to bind (default 127.0.0.1: this machine only)."),
    port: Optional[int] = typer.Option(None, "--port", help="Port (default 8700; 0 picks a free one)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="Require this bearer token (prefer CLOVERCODE_SERVE_API_KEY)."),
    keys_file: Optional[str] = typer.Option(None, "--api-keys-file", help="Accept the keys in this file, one 'NAME KEY' a line."),
    model_name: Optional[str] = typer.Option(None, "--model-name", help="Model id clients see and must ask for."),
    max_batch: Optional[int] = typer.Option(None, "--max-batch", help="Requests decoded together when the backend can batch."),
    max_queue: Optional[int] = typer.Option(None, "--max-queue", help="Requests allowed to wait; more get HTTP 429."),
    quantization: Optional[str] = QuantOpt,
) -> None:
    """Serve the model over an OpenAI-compatible HTTP API (/v1/chat/completions) for many clients."""
    from clovercode.front.servecmd import run_serve

    # `endpoint` is for clients: a GPU box whose config points at itself must still serve its own model.
    cfg = load_config(None, os.environ, {"model": model, "serve.host": host, "serve.port": port, "serve.api_key": api_key,
                                         "serve.api_keys_file": keys_file,
                                         "serve.model_name": model_name, "serve.max_batch": max_batch,
                                         "serve.max_queue": max_queue, "engine.quantization": quantization}).with_overrides({"endpoint": ""}, "serve")
    raise typer.Exit(run_serve(cfg, make_console(stderr=True)))


tools_app = typer.Typer(cls=CloverGroup, help="List the tools the model can call, or show one's schema.")
app.add_typer(tools_app, name="tools")


@tools_app.callback(invoke_without_command=True)
def tools_list(ctx: typer.Context) -> None:
    """List the tools (without a subcommand)."""
    if ctx.invoked_subcommand is not None:
        return
    from clovercode.mcpservers.command import mcp_specs
    from clovercode.toolcalls.schemas import load_tool_specs, signature

    console = make_console()
    root = project_root(None)
    extra, warnings = mcp_specs(root, effective_config(root))  # MCP servers' tools, when any are configured
    for spec in load_tool_specs() + extra:
        console.print(f"[bold cyan]{escape(spec.name)}[/]  {escape(spec.description)}", highlight=False)
        console.print(f"    [dim]{escape(signature(spec))}[/]", highlight=False)
    for warning in warnings:
        make_console(stderr=True).print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)


@tools_app.command("show")
def tools_show(name: str = typer.Argument(..., help="Tool name.")) -> None:
    """Print a tool's JSON Schema."""
    from clovercode.toolcalls.schemas import load_tool_specs
    from clovercode.toolcalls.validate import unknown_tool_message

    specs = {s.name: s for s in load_tool_specs()}
    if name not in specs and "__" in name:  # SERVER__TOOL: ask the MCP servers
        from clovercode.mcpservers.command import mcp_specs

        root = project_root(None)
        specs.update({s.name: s for s in mcp_specs(root, effective_config(root))[0]})
    if name not in specs:
        raise UsageError(unknown_tool_message(name, list(specs)))
    typer.echo(json.dumps(specs[name].schema, indent=2))


mcp_app = typer.Typer(cls=CloverGroup, help="MCP servers: list them with their tools, or check one.", no_args_is_help=True)
app.add_typer(mcp_app, name="mcp")


@mcp_app.command("list")
def mcp_list(repo: Optional[Path] = RepoOpt) -> None:
    """Start the configured MCP servers and list each one's status and tools."""
    from clovercode.mcpservers.command import run_list

    root = project_root(repo)
    raise typer.Exit(run_list(root, effective_config(root), make_console()))


@mcp_app.command("check")
def mcp_check(name: str = typer.Argument(..., help="The server's name ([mcp_servers.NAME])."),
              repo: Optional[Path] = RepoOpt) -> None:
    """Start one MCP server (even a disabled one) and show its tools; exit 1 when it does not work."""
    from clovercode.mcpservers.command import run_check

    root = project_root(repo)
    raise typer.Exit(run_check(root, effective_config(root), name, make_console()))


config_app = typer.Typer(cls=CloverGroup, help="Inspect configuration.")
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(repo: Optional[Path] = RepoOpt,
                as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Print the effective configuration, where each value came from, and the project settings ignored."""
    from clovercode.front.configshow import show_config

    show_config(effective_config(project_root(repo)), as_json, make_console())


app.add_typer(make_bench_app(CloverGroup, project_root, effective_config), name="bench")


# --- workspace safety (sandbox, undo): bodies in sandboxcmd.py, bench/sandbox.py, undocmd.py ---
sandbox_app = typer.Typer(cls=CloverGroup, help="Check the command sandbox, or run one command in it.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("check")
def sandbox_check(repo: Optional[Path] = RepoOpt, sandbox: Optional[str] = SandboxOpt) -> None:
    """Self-test this host: bubblewrap, user namespaces, and whether the policy holds."""
    from clovercode.front.sandboxcmd import run_check

    root = project_root(repo)
    raise typer.Exit(run_check(root, effective_config(root, sandbox=sandbox), make_console()))


@sandbox_app.command("run")
def sandbox_run(
    command: list[str] = typer.Argument(..., help="The command (after --); one argument with spaces runs as a shell line."),
    repo: Optional[Path] = RepoOpt,
    sandbox: Optional[str] = SandboxOpt,
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds before the command is killed."),
    explain: bool = typer.Option(False, "--explain", help="Print the bwrap command line first (on stderr)."),
) -> None:
    """Run one command under the active sandbox policy, as run_command would."""
    from clovercode.front.sandboxcmd import run_in_sandbox

    root = project_root(repo)
    cfg = effective_config(root, sandbox=sandbox)
    raise typer.Exit(run_in_sandbox(root, cfg, command, timeout, explain, make_console(stderr=True)))


@app.command()
def undo(repo: Optional[Path] = RepoOpt,
         redo: bool = typer.Option(False, "--redo", help="Take the last undo back."),
         list_: bool = typer.Option(False, "--list", help="List the checkpoints instead.")) -> None:
    """Restore the files as they were before clovercode's last run changed them."""
    from clovercode.front.undocmd import list_checkpoints, run_undo

    root = project_root(repo)
    if list_:
        list_checkpoints(root, make_console())
    else:
        run_undo(root, make_console(), redoing=redo)


@app.command("map")
def map_command(path: Optional[Path] = typer.Argument(None, help="Project directory (default: the current directory)."),
                tokens: Optional[int] = typer.Option(None, "--tokens", "-t", help="Token budget (default: context.map_tokens)."),
                focus: list[str] = typer.Option([], "--focus", "-f", metavar="FILE|SYMBOL", help="Rank for this FILE or SYMBOL (repeatable, or comma-separated)."),
                stats: bool = typer.Option(False, "--stats", help="Also report what was indexed, on stderr.")) -> None:
    """Print the repository map: the most used definitions, as an outline that fits the budget."""
    from clovercode.front.contextcmd import print_map

    root = project_root(path)
    print_map(root, effective_config(root), tokens, focus, stats, make_console(), make_console(stderr=True))


@app.command("init")
def init_command(repo: Optional[Path] = RepoOpt,
                 force: bool = typer.Option(False, "--force", help="Replace an existing AGENTS.md.")) -> None:
    """Write a starter AGENTS.md (instructions every run includes in the prompt)."""
    from clovercode.context.starter import write_starter

    path = write_starter(project_root(repo), force)
    typer.echo(f"wrote {path}: fill in the <placeholders>; clovercode puts it verbatim in the system prompt")


traj_app = typer.Typer(cls=CloverGroup, help="Work with run trajectories.")
app.add_typer(traj_app, name="trajectory")


@traj_app.command("to-replay")
def trajectory_to_replay(path: Path = typer.Argument(..., help="A trajectory .jsonl file."),
                         output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write here instead of stdout."),
                         attempt: Optional[int] = typer.Option(None, "--attempt", min=1,
                                                               help="Of a `fix --attempts` run: this attempt (default: the chosen one).")) -> None:
    """Turn a trajectory into a replay file for --model replay:FILE."""
    from clovercode.agent.trajectory import to_replay

    lines = "".join(json.dumps(turn, ensure_ascii=False) + "\n" for turn in to_replay(path, attempt))
    if output:
        try:
            output.write_text(lines, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    else:
        typer.echo(lines, nl=False)


app.add_typer(make_eval_app(CloverGroup, ModelOpt, SandboxOpt, EndpointOpt, ApiKeyOpt), name="eval")


from clovercode.front import botcli  # noqa: E402,F401 - registers `review` and `respond` on app


def main() -> None:
    for stream in (sys.stdout, sys.stderr):  # a locale that lacks a character gets "?", never a traceback
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", "strict") == "strict":
            reconfigure(errors="replace")
    try:
        from clovercode.front.contextcmd import resume_argv

        app(prog_name="clovercode", args=resume_argv(sys.argv[1:]))
    except KeyboardInterrupt as exc:  # a signal while typer builds the commands, before any handler of ours
        exit_interrupted_early(exc)
    except Exception as exc:  # the same signal, wrapped by Python on the way (termination.interrupt_behind)
        interrupt = interrupt_behind(exc)
        if interrupt is None:
            raise
        exit_interrupted_early(interrupt)
    except SystemExit as exc:
        if exc.code == int(ExitCode.INTERRUPTED) and silent_interrupt(exc) is not None:
            exit_interrupted_early(silent_interrupt(exc))  # type: ignore[arg-type]
        if exc.code == int(ExitCode.INTERRUPTED):
            # A Ctrl-C that lands while code built by exec() runs (dataclasses make their methods so,
            # at import) is remembered by CPython even once handled; `python -m clovercode` would then
            # end by SIGINT instead of exit code 130. Everything is written and flushed by now.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(int(ExitCode.INTERRUPTED))
        raise

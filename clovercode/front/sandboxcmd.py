"""Bodies of ``clovercode sandbox check`` and ``clovercode sandbox run``."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.markup import escape

from clovercode.ground.config import Config, state_dir
from clovercode.ground.errors import ExitCode, UsageError

TIMED_OUT_EXIT = 124  # what coreutils' timeout(1) uses


def warn_stderr(message: str) -> None:
    Console(stderr=True).print(f"[bold red]{escape(message)}[/]", highlight=False)


def scratch_parent(env) -> Path:
    """Somewhere outside /tmp (which the sandbox replaces), so the probe tests the real mounts."""
    var_tmp = Path("/var/tmp")
    if var_tmp.is_dir() and os.access(var_tmp, os.W_OK):
        return var_tmp
    return state_dir(env) / "sandbox-check"


def run_check(root: Path, cfg: Config, console: Console) -> int:
    from clovercode.sandboxing.selftest import run_checks

    name = cfg["sandbox"]
    if name == "none":
        warn_stderr("The sandbox is off (--sandbox none): there is nothing to check. Commands run unsandboxed.")
        name = "workspace-write"
        console.print("Checking the default policy instead.", highlight=False)
    checks = run_checks(name, dict(os.environ), scratch_parent(os.environ))
    for check in checks:
        mark = "[green]✓[/]" if check.ok else "[red]✗[/]"
        detail = f" [dim]— {escape(check.detail)}[/]" if check.detail else ""
        console.print(f"{mark} {escape(check.name)}{detail}", highlight=False)
        if not check.ok and check.fix:
            console.print(f"  fix: {escape(check.fix)}", highlight=False)
    failed = [c for c in checks if not c.ok]
    if failed:
        console.print(f"[red]sandbox check failed[/] ({len(failed)} of {len(checks)} checks)", highlight=False)
        return int(ExitCode.SANDBOX_UNAVAILABLE)
    _describe_project(root, cfg, name, console)
    console.print(f"[green]sandbox check passed[/] ({len(checks)} checks, policy {name})", highlight=False)
    return 0


def _describe_project(root: Path, cfg: Config, name: str, console: Console) -> None:
    from clovercode.sandboxing.ownpaths import policy_for
    from clovercode.sandboxing.survey import survey

    layout = survey(policy_for(name, cfg, os.environ, root), root, root, os.environ)
    protected = ", ".join(os.path.relpath(p, layout.project) for p in layout.read_only) or "none"
    console.print(f"[dim]in {escape(str(root))}: read-only inside the project: {escape(protected)}; "
                  f"{len(layout.hidden_dirs) + len(layout.hidden_files)} host secret paths hidden[/]", highlight=False)
    if layout.homes:
        shown = ", ".join(layout.home_visible) or "nothing"
        console.print(f"[dim]home hidden: {escape(', '.join(layout.homes))}; bound back read-only: {escape(shown)} "
                      f"(add more with sandbox_show in your config)[/]", highlight=False, soft_wrap=True)


def run_in_sandbox(root: Path, cfg: Config, command: Sequence[str], timeout: float | None, explain: bool,
                   console: Console) -> int:
    """Run one command under the active policy; its output to stdout, its exit code as ours."""
    from clovercode.executors.bwrap import BwrapExecutor
    from clovercode.executors.select import make_executor

    if not command:
        raise UsageError("no command given", hint="Usage: clovercode sandbox run -- COMMAND [ARGS...]")
    # One argument with spaces is a shell line ("make test && echo ok"); several are an argv.
    run: str | list[str] = command[0] if len(command) == 1 and any(c.isspace() for c in command[0]) else list(command)
    executor = make_executor(cfg, root, warn=warn_stderr, preflight=False)
    if explain:
        if isinstance(executor, BwrapExecutor):
            argv = executor.argv(run, executor.layout(Path.cwd()))
            Console(stderr=True).print(escape(shlex.join(argv)), highlight=False, soft_wrap=True)
        else:
            Console(stderr=True).print("(no sandbox)", highlight=False)
    cwd = Path.cwd().resolve()
    if cwd != root and root not in cwd.parents:
        cwd = root
    result = executor.run(run, cwd, timeout or cfg["command_timeout"])
    sys.stdout.write(result.output)
    if result.output and not result.output.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()
    if result.timed_out:
        console.print(f"[yellow]timed out after {result.seconds:.1f}s; its processes were killed[/]", highlight=False)
        return TIMED_OUT_EXIT
    return int(result.exit_code or 0)

"""The typer app every command registers on, its shared options, and the one place domain errors become
exit codes (CloverGroup). The commands live in cli.py and botcli.py."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer
from rich.text import Text
from typer.core import TyperGroup

from clovercode import __version__
from clovercode.ground.config import Config, load_config, state_dir
from clovercode.ground.errors import CloverError, ExitCode, UsageError
from clovercode.front.jsonexit import json_command, print_interrupted, print_json_error
from clovercode.ground.privatefiles import private_dir, write_private
from clovercode.ui.console import make_console


class CloverGroup(TyperGroup):
    """Turns CloverError into a clear message + its exit code, Ctrl-C into 130, bugs into 70."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from clovercode.front.startargs import lift_task

        return super().parse_args(ctx, lift_task(self, args))  # `clovercode "task"`: the REPL's first message

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except CloverError as exc:
            report_error(exc)
            if json_command(sys.argv[1:]) == "exec":  # fix answers its own errors in its one object
                print_json_error(sys.argv[1:], "error", int(exc.exit_code), str(exc))
            raise typer.Exit(int(exc.exit_code)) from None
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP where termination.py catches them
            _exit_interrupted(exc)
        except Exception as exc:
            if type(exc).__module__.split(".")[0] in ("typer", "click"):
                if isinstance(exc, typer.BadParameter.__mro__[1]):  # UsageError: `fix --json --test-rounds x`
                    print_json_error(sys.argv[1:], "error", int(ExitCode.USAGE), exc.format_message())
                raise  # exits, usage errors and aborts: typer reports those itself
            from clovercode.ground.termination import interrupt_behind

            interrupt = interrupt_behind(exc)  # library clean-up can turn an interrupt into an error
            if interrupt is not None:
                _exit_interrupted(interrupt)
            # A bug: keep the traceback, but in a file, not on the user's screen.
            path = save_crash_report(traceback.format_exc())
            make_console(stderr=True).print(f"[red]internal error[/]: clovercode hit a bug. Details: {path}")
            if json_command(sys.argv[1:]) == "exec":
                print_json_error(sys.argv[1:], "error", int(ExitCode.INTERNAL), f"internal error: clovercode hit a bug ({path})")
            raise typer.Exit(int(ExitCode.INTERNAL)) from None


def _exit_interrupted(exc: KeyboardInterrupt) -> NoReturn:
    from clovercode.ground.termination import interrupt_detail

    print_interrupted(exc)  # the one JSON object of `fix --json` (an error event for `exec --json`)
    make_console(stderr=True).print(f"[yellow]{interrupt_detail(exc).removesuffix(' by the user (Ctrl-C)')}[/]")
    raise typer.Exit(getattr(exc, "exit_code", int(ExitCode.INTERRUPTED))) from None


def report_error(exc: CloverError) -> None:
    console = make_console(stderr=True)
    console.print(Text.assemble(("error", "red"), ": ", exc.message), soft_wrap=True, highlight=False)
    if exc.hint:
        console.print(exc.hint, markup=False, highlight=False, soft_wrap=True)


def save_crash_report(text: str) -> Path:
    directory = state_dir(os.environ) / "crashes"
    try:
        private_dir(directory)
        path = directory / f"crash-{os.getpid()}.txt"
        write_private(path, text)
        return path
    except OSError:
        sys.stderr.write(text)
        return Path("(printed above)")


app = typer.Typer(cls=CloverGroup, help="clovercode: an agentic coding assistant for the terminal.",
                  no_args_is_help=False, add_completion=True, rich_markup_mode=None, pretty_exceptions_enable=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"clovercode {__version__}")
        raise typer.Exit()


RepoOpt = typer.Option(None, "--repo", "-C", help="Project directory (default: the current directory).")
ModelOpt = typer.Option(None, "--model", "-m", help="Model: replay:FILE.jsonl, a local dir, an HF repo id, a .gguf, or an alias.")
SandboxOpt = typer.Option(None, "--sandbox", help="Sandbox policy: read-only, workspace-write, workspace-write-network, none.")
EndpointOpt = typer.Option(None, "--endpoint", help="OpenAI-compatible server to use instead of a local model, e.g. http://127.0.0.1:30000/v1.")
ApiKeyOpt = typer.Option(None, "--api-key", help="API key for --endpoint (prefer the CLOVERCODE_API_KEY env var).")
EndpointStreamOpt = typer.Option(None, "--endpoint-stream", help="Stream replies from --endpoint: auto, true or false "
                                 "(false for llama-cpp-python's chatml-function-calling).")
TrustOpt = typer.Option(False, "--trust-project", help="Trust this project's clovercode.toml for this run (CI: its owner wrote it).")


def project_root(repo: Optional[Path]) -> Path:
    root = (repo or Path.cwd()).expanduser()
    if root.exists() and not root.is_dir():
        raise UsageError(f"--repo {root} is a file, not a directory", hint="Pass the project's directory.")
    if not root.is_dir():
        raise UsageError(f"project directory not found: {root}")
    return root.resolve()


def workspace_root(repo: Optional[Path]) -> tuple[Path, str | None]:
    """The project of fix and the REPL: ``--repo`` exactly as given (a monorepo's subproject), else the
    git top level of the current directory, so repository paths and the tests mean the same wherever
    in the repository the run starts; a note says when the root is not where it started."""
    from clovercode.vcs.git import toplevel

    start = project_root(repo)
    top = toplevel(start) if repo is None else None
    if top is None or top == start:
        return start, None
    return top, f"working in the repository root {top} (started in {start})"


def effective_config(root: Path, trust_project: bool = False, **flags: Any) -> Config:
    return load_config(root, os.environ, flags, trust_project)


"""``clovercode exec "task"``: one headless run of the agent — no git requirement, no commit, no
questions. Progress goes to stderr and the final answer to stdout, or, with ``--json``, the run's
events as JSON Lines on stdout (ui/jsonevents.py). Exit codes are fix's (errors.ExitCode)."""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.markup import escape

from clovercode.actions.approval import PLAN, ModeApprover
from clovercode.actions.approval_view import render_approval
from clovercode.actions.context import ApprovalRequest, ToolError
from clovercode.agent.budget import StopReason
from clovercode.agent.events import EventSink
from clovercode.agent.planmode import plan_task
from clovercode.ground.config import Config, trajectory_dir
from clovercode.ground.errors import CloverError, ExitCode, UsageError
from clovercode.executors.select import NO_SANDBOX_WARNING
from clovercode.agent.trajectory import new_trajectory_path
from clovercode.toolcalls.schemas import load_tool_specs
from clovercode.ground.taskinput import check_task
from clovercode.trust.terminal import inert
from clovercode.ui.jsonevents import JsonEventWriter


def open_session(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201 - wiring.session's, loaded when called
    """The session, with the loop's many modules loaded only now: after run_started is written."""
    from clovercode.wiring.session import open_session as real

    return real(*args, **kwargs)


def exit_code_for(stop: str, signum: int | None = None) -> int:
    """fix's exit codes, less those about tests and commits: an exec run commits nothing."""
    from clovercode.ground.termination import exit_code

    reason = StopReason(stop)
    if reason in (StopReason.FINISHED, StopReason.ANSWERED):
        return int(ExitCode.OK)
    if reason is StopReason.INTERRUPTED:
        return exit_code(signum)  # 130 for Ctrl-C, 128 + N for SIGTERM / SIGHUP
    if reason is StopReason.MODEL_ERROR:
        return int(ExitCode.MODEL_UNAVAILABLE)
    return int(ExitCode.GAVE_UP)


def read_task(task: str | None, stdin: TextIO) -> str:
    """The task: the argument, or stdin when the argument is missing or ``-`` and stdin is not a terminal."""
    if task is None or task == "-":
        if stdin.isatty():
            raise UsageError("exec needs a task", hint='Give it as an argument (clovercode exec "fix the failing test") '
                             "or pipe it in on stdin.")
        task = stdin.read()
    return check_task(task).strip("\n")  # the one rule of the REPL, fix and exec (taskinput.py)


class RefusingAsk:
    """Nobody is there to ask: what the approval mode would ask about is refused, and said so."""

    def __init__(self, mode: str):
        self.mode, self.sink = mode, None  # type: EventSink | None

    def __call__(self, request: ApprovalRequest) -> str:  # never returns: it raises ToolError
        if self.sink is not None:  # the first line says what happened; the rest is all of it, as the REPL shows it
            view = render_approval(request)
            self.sink.emit("warning", category="approval",
                           text=f"refused {refused_what(request, view.title)}: exec asks nobody (--approval {self.mode})\n"
                                + view.plain())
        # nobody declined: the model is told what happened, so it does not wait for a person's answer
        raise ToolError(f"Not done: this run is headless (clovercode exec) and --approval {self.mode} refuses "
                        f"{refused_what(request)}, since nobody can be asked. Do without it, or say what is needed.")


def refused_what(request: ApprovalRequest, title: str | None = None) -> str:
    """What was refused, named as the user knows it: an MCP call is a server's tool, not a command.
    ``title``: the approval view's, which never passes a command's first line off as all of it."""
    what = {"edit": "the edit", "mcp": "the MCP tool"}.get(request.kind, "the command")
    return f"{what} `{request.title if title is None else title}`"


def run_exec(root: Path, cfg: Config, task: str, as_json: bool, out: TextIO, err: Console, *,
             deltas: bool = False, resume: str | None = None) -> int:
    """``deltas``: with ``as_json``, also write the model's text as it comes (model_text_delta);
    ``resume``: a saved session to continue (its id, or "@latest": this project's newest)."""
    from clovercode.ui.console import use_theme

    use_theme(err, cfg["ui.theme"], os.environ)
    ask = RefusingAsk(cfg["approval"])
    approver = ModeApprover(cfg["approval"], cfg["sandbox"] != "none", ask, cfg["permissions.allow"])
    writer = None
    trajectory = new_trajectory_path(trajectory_dir(cfg, os.environ), task.split("\n")[0])
    session_id = trajectory.stem  # a resumed run goes on under the session's own id (`sessions` lists it)
    if resume is not None:
        from clovercode.front.contextcmd import resumed_session_id

        session_id = resumed_session_id(cfg, root, resume) or session_id
    if as_json:  # made and started first: a script sees the run begin before the model loads, and a
        # model that cannot load still ends the stream by its contract
        writer = JsonEventWriter(out, exit_code=exit_code_for, deltas=deltas,
                                 trajectory=lambda: trajectory if trajectory.exists() else None,
                                 start={"task": task, "model": cfg["model"], "sandbox": cfg["sandbox"],
                                        "max_steps": cfg["max_steps"], "session_id": session_id,
                                        "tools": [spec.name for spec in load_tool_specs()]})
        writer.begin()
    try:
        # MCP servers: a short wait (mcp.startup_wait) so a one-shot task can use them from its first
        # turn, as headless peers do; a slower server joins when ready instead of holding up the run.
        with writer.loading(cfg["model"]) if writer is not None else nullcontext():
            session = open_session(root, cfg, interactive=True, approve=approver, unattended=True,
                                   mcp_wait=cfg["mcp.startup_wait"])
        session.next_trajectory = trajectory
        if session.mcp is not None and session.mcp.starting:  # their tools join when ready; the run goes on
            names = session.mcp.starting
            session.notices.append(("mcp", f"MCP server{'s' if len(names) > 1 else ''} {', '.join(names)} still starting "
                                           f"after {cfg['mcp.startup_wait']:g} s: {'their' if len(names) > 1 else 'its'} "
                                           "tools join when ready"))
        if resume is not None:
            from clovercode.front.contextcmd import resume_into

            try:
                resume_into(session, resume, err)  # the conversation so far; what it says goes to stderr
            except BaseException:
                session.close()
                raise
    except CloverError as exc:
        return _failed(exc, writer, err)
    if cfg["sandbox"] == "none":
        err.print(f"[bold red]{NO_SANDBOX_WARNING}[/]", highlight=False, soft_wrap=True)
        if writer is not None:  # a script reads the stream, not stderr
            session.notices.append(("sandbox", NO_SANDBOX_WARNING))
    sink: EventSink
    if writer is not None:
        sink = writer
    else:
        from clovercode.ui.render import ConsoleRenderer  # the human renderer: --json never loads it

        sink = ConsoleRenderer(err)
    ask.sink = sink
    if cfg["approval"] == PLAN:  # read only (the approver refuses changes); the model is told why
        task = plan_task(task)
    try:
        result = session.run_task(task, sink)
    except CloverError as exc:
        return _failed(exc, writer, err)
    finally:
        session.close()
    code = exit_code_for(result.stop.value, result.signal)
    if writer is None:
        if result.summary and code == 0:
            summary = result.summary.rstrip("\n")  # the answer is data in a pipe; on a terminal it is drawn
            out.write((inert(summary) if out.isatty() else summary) + "\n")
            out.flush()
        elif code != 0:
            err.print(f"[yellow]{escape(result.detail)}[/]", highlight=False, soft_wrap=True)
        if session.last_trajectory:
            ident = session.session_id or session.last_trajectory.stem
            err.print(f"[dim]session {ident} · resume with clovercode --resume {ident}[/]", highlight=False,
                      soft_wrap=True)
    return code


def report_to(err: Console, exc: CloverError) -> None:
    """The error on stderr too: a person watching a --json run reads it there."""
    err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False, soft_wrap=True)


def exec_config(base: Config, approval: str | None) -> Config:
    """exec is full-auto unless told otherwise: the user's REPL approval setting is for the REPL."""
    return base.with_overrides({"approval": approval or "full-auto"}, "flag" if approval else "exec (full-auto)")


def _failed(exc: CloverError, writer: "JsonEventWriter | None", err: Console) -> int:
    """A run that could not start or go on: with --json, the error event and its exit code; else raised
    for the CLI's own error report."""
    if writer is None:
        raise exc
    report_to(err, exc)
    writer.fail(str(exc), int(exc.exit_code))
    return int(exc.exit_code)

"""run_command: a shell command in the project directory, through the context's executor."""

from __future__ import annotations

from typing import Any

from clovercode.actions.context import ApprovalRequest, Observation, ToolContext, ToolError


def run_command(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    command = args["command"]
    timeout = float(args.get("timeout") or ctx.command_timeout)
    if not ctx.approve(ApprovalRequest("command", command, f"runs in sandbox: {ctx.executor.name}")):
        raise ToolError("The user declined to run this command.")
    # Commands may change files too: record the checkpoint first (a read-only sandbox cannot).
    warning = ctx.checkpoint() if ctx.executor.name != "read-only" else None
    writes = ctx.executor.name != "read-only" and ctx.bytecode is not None
    if writes:
        ctx.bytecode.before_command()
    try:
        live = {"on_output": ctx.output} if ctx.output is not None else {}  # test executors may lack it
        result = ctx.executor.run(command, ctx.root, timeout, ctx.command_env, **live)
    finally:  # also when interrupted: what the command changed may have bytecode of the user's
        if writes:
            ctx.bytecode.after_command()
    ok = result.exit_code == 0 and not result.timed_out
    text = result.describe() + (f"\n{warning}" if warning else "")
    return Observation(ok, text, {"exit_code": result.exit_code, "timed_out": result.timed_out,
                                               "omitted_bytes": result.omitted_bytes, "seconds": round(result.seconds, 3)})

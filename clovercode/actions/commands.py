"""run_command: a shell command in the project directory, through the context's executor."""

from __future__ import annotations

from typing import Any

from clovercode.actions.context import ApprovalRequest, Observation, ToolContext, ToolError


def run_command(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    command = args["command"]
    timeout = float(args.get("timeout") or ctx.command_timeout)
    if not ctx.approve(ApprovalRequest("command", command, f"runs in sandbox: {ctx.executor.name}")):
        raise ToolError("The user declined to run this command.")
    result = ctx.executor.run(command, ctx.root, timeout, ctx.command_env)
    ok = result.exit_code == 0 and not result.timed_out
    return Observation(ok, result.describe(), {"exit_code": result.exit_code, "timed_out": result.timed_out,
                                               "omitted_bytes": result.omitted_bytes, "seconds": round(result.seconds, 3)})

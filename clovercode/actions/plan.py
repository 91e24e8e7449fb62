"""update_plan: the model's checklist for the task. It changes no file and runs nothing; the steps
go out as a ``plan`` event (the REPL draws a checklist, exec --json writes a ``plan`` line, ACP
sends a plan update) and the model reads a one-line summary back."""

from __future__ import annotations

from typing import Any

from clovercode.actions.context import Observation, ToolContext, ToolError

PENDING, IN_PROGRESS, COMPLETED = "pending", "in_progress", "completed"
STATUSES = (PENDING, IN_PROGRESS, COMPLETED)


def update_plan(ctx: ToolContext, args: dict[str, Any]) -> Observation:
    steps = [{"step": str(item["step"]).strip(), "status": item["status"]} for item in args["plan"]]
    running = [item["step"] for item in steps if item["status"] == IN_PROGRESS]
    if len(running) > 1:  # the schema cannot say it in a way every grammar compiler accepts
        raise ToolError(f"At most one step may be in_progress; {len(running)} are ({'; '.join(running)}). "
                        "Mark the others pending or completed and send the whole plan again.")
    explanation = str(args.get("explanation") or "").strip()
    ctx.emit("plan", steps=steps, explanation=explanation)
    return Observation(True, summary(steps), {"plan": steps, **({"explanation": explanation} if explanation else {})})


def summary(steps: list[dict[str, str]]) -> str:
    """What the model reads back: where the plan stands, in one line."""
    done = sum(item["status"] == COMPLETED for item in steps)
    now = next((item["step"] for item in steps if item["status"] == IN_PROGRESS), None)
    text = f"Plan updated: {done} of {len(steps)} step{'' if len(steps) == 1 else 's'} completed"
    return text + (f"; in progress: {now}." if now else ".")

"""Plan mode in an editor, as Claude Code's and Codex's adapters do it: the task is framed for
planning (agent/planmode.py) and the approver refuses every change; when the turn ends with a plan,
the person is asked (a ``switch_mode`` tool call and its permission question) whether to start on
it, and in which mode. A yes switches the mode and the same prompt carries the plan out; a no (or a
dismissed question) leaves the session in plan mode with the plan on the screen.
"""

from __future__ import annotations

from typing import Any

from clovercode.front.acp.updates import UpdateMapper

PLAN = "plan"
START = {"plan-auto-edit": "auto-edit", "plan-ask": "ask"}
OPTIONS = [{"optionId": "plan-auto-edit", "name": "Yes, and apply edits without asking", "kind": "allow_always"},
           {"optionId": "plan-ask", "name": "Yes, and ask before each change", "kind": "allow_once"},
           {"optionId": "plan-keep", "name": "No, keep planning", "kind": "reject_once"}]
DONE = ("finished", "answered")


def run_planned(live: Any, task: str) -> Any:
    """One prompt in plan mode, on the turn's thread; the RunResult of the last task it ran."""
    from clovercode.agent.planmode import approved_task, plan_task

    result = live.session.run_task(plan_task(task), live.mapper)
    if result.stop.value not in DONE or not live.mapper.planned or live.mode != PLAN:
        return result
    chosen = _ask(live)
    if chosen is None:
        return result
    live.switch_mode(chosen)
    live.turns += 1  # the loop numbers calls per task: the new task's calls need ids of their own
    live.mapper = UpdateMapper(live.root, live.post_update, live.writes, prefix=f"t{live.turns}-")
    return live.session.run_task(approved_task(), live.mapper)


def _ask(live: Any) -> str | None:
    from acp.schema import PermissionOption, ToolCallUpdate

    call_id = f"t{live.turns}-plan"
    live.post_update({"sessionUpdate": "tool_call", "toolCallId": call_id, "title": "Start on the plan?",
                      "kind": "switch_mode", "status": "pending"})
    question = ToolCallUpdate.model_validate({"toolCallId": call_id, "title": "Start on the plan?",
                                              "kind": "switch_mode", "status": "pending"})
    try:
        answer = live.call("request_permission", session_id=live.id, tool_call=question, question=True,
                           options=[PermissionOption.model_validate(o) for o in OPTIONS])
        outcome = answer.outcome
        chosen = START.get(getattr(outcome, "option_id", "")) if getattr(outcome, "outcome", "") == "selected" else None
    except Exception:  # the client went away or failed the question: keep planning
        chosen = None
    live.post_update({"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                      "status": "completed" if chosen else "failed"})
    return chosen

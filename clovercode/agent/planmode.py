"""Plan mode's words to the model: how a task is framed while planning, and what is said when the
person approves the plan. The refusal of every change lives in the approver (actions/approval.py),
so a front end that forgets the framing still cannot change anything."""

from __future__ import annotations

PLAN_FRAME = ("[Plan mode: investigate with the reading tools only (view_file, list_files, search_text) and change "
              "nothing. Write your plan with update_plan (every step pending), then answer with a short summary "
              "of it. The user approves the plan before anything changes.]\n\n")
APPROVED = ("The user approved the plan. Carry it out now, step by step, and keep the checklist current with "
            "update_plan (one step in_progress at a time).")


def plan_task(task: str) -> str:
    """``task`` as the model reads it in plan mode."""
    return PLAN_FRAME + task


def approved_task(note: str = "") -> str:
    """The message that starts the work once the plan is approved (``note``: what the person added)."""
    return APPROVED + (f"\n\n{note.strip()}" if note.strip() else "")

"""Approvals through the client: what the approval mode would ask a person about becomes a
``session/request_permission`` with three options mapped onto the REPL's answers (actions/approval.py):
allow once = yes, allow always = always (a command rule saved in the user's config and named in the
option: a prefix only for allowlisted programs, else the exact command; an edit or MCP tool for the
rest of the session; no "always" for a compound command, which no rule covers), reject = no. An answer of "cancelled" (the person cancelled
the turn) stops the run as Ctrl-C at the REPL's prompt does."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

from clovercode.front.acp.markdown import fenced
from clovercode.actions.approval import ALWAYS, CANCEL, NO, YES, Reply
from clovercode.actions.approval_view import render_approval
from clovercode.actions.context import ApprovalRequest
from clovercode.actions.permissions import command_rule, describe
from clovercode.trust.terminal import revealed

ALLOW_ONCE, ALLOW_ALWAYS, REJECT_ONCE = "allow-once", "allow-always", "reject-once"
ANSWERS = {ALLOW_ONCE: YES, ALLOW_ALWAYS: ALWAYS, REJECT_ONCE: NO}
KIND = {"edit": "edit", "command": "execute", "mcp": "other"}


def options(request: ApprovalRequest) -> list[dict[str, str]]:
    always = {"edit": "Allow all edits this session",
              "mcp": "Always allow this tool this session"}.get(request.kind, "Always allow")
    if request.kind == "command":  # name the very rule it saves, as the REPL's question does
        rule = command_rule(request.title)
        if rule is None:  # a compound command: no rule can cover it, so no "always"
            return [{"optionId": ALLOW_ONCE, "name": "Allow", "kind": "allow_once"},
                    {"optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once"}]
        named = revealed(describe(rule), newlines=False)
        always = (f"Always allow {named} (a rule in your config)" if len(named) <= 300
                  else "Always allow exactly this command, as shown above (a rule in your config)")
    return [{"optionId": ALLOW_ONCE, "name": "Allow", "kind": "allow_once"},
            {"optionId": ALLOW_ALWAYS, "name": always, "kind": "allow_always"},
            {"optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once"}]


def content(request: ApprovalRequest, root: Path) -> list[dict[str, Any]]:
    """Everything the person must see to answer, as ToolCallContent, from the one approval renderer
    (actions/approval_view.py) the REPL and exec draw too: an edit's files as ``diff`` blocks the
    editor draws, with what the renderer warns about; a command or MCP call as the renderer's whole
    text (every line, hidden characters written out) in a code fence."""
    view = render_approval(request)
    if view.changes:  # the editor wants absolute paths; the request's are the project's
        blocks: list[dict[str, Any]] = [
            {"type": "diff", "path": str(root / c.path), "newText": c.new or "", **({"oldText": c.old} if c.old is not None else {})}
            for c in view.changes]
        if view.escaped:  # the diff blocks carry the text raw: the rendered diff shows what it hides
            blocks.append(_text(fenced(view.plain())))
        elif view.warnings:
            blocks.append(_text("\n".join(f"⚠ {warning}" for warning in view.warnings)))
        return blocks
    return [_text(fenced(view.plain()))]


def _text(text: str) -> dict[str, Any]:
    return {"type": "content", "content": {"type": "text", "text": text}}


def answer(outcome: Any) -> Reply:
    """The client's RequestPermissionOutcome as the approver's reply; anything unknown is a no."""
    if getattr(outcome, "outcome", None) == "selected":
        return Reply(ANSWERS.get(getattr(outcome, "option_id", ""), NO))
    return Reply(CANCEL)


class ClientAsk:
    """The ``ask`` of a ModeApprover in an ACP session. ``current`` gives the tool call being run
    (its id and title), so the client shows the question on that call; ``call`` sends the request
    and waits for the answer (outbox.Outbox.call)."""

    def __init__(self, session_id: str, call: Callable[..., Any], current: Callable[[], "tuple[str, str] | None"],
                 root: Path):
        self.session_id, self.call, self.current, self.root = session_id, call, current, root

    def __call__(self, request: ApprovalRequest) -> Reply:
        from acp.schema import PermissionOption, ToolCallUpdate

        running = self.current()
        call_id, title = running if running else ("approval", render_approval(request).title)
        tool_call = ToolCallUpdate.model_validate({
            "toolCallId": call_id, "title": title.splitlines()[0][:200] if title else request.kind,
            "kind": KIND.get(request.kind, "other"), "status": "pending", "content": content(request, self.root) or None})
        try:
            response = self.call("request_permission", session_id=self.session_id, tool_call=tool_call,
                                 options=[PermissionOption.model_validate(o) for o in options(request)], question=True)
        except (Exception, asyncio.CancelledError):  # dropped at session/cancel, or the client went away
            return Reply(CANCEL)
        return answer(response.outcome)

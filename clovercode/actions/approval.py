"""Approval modes, separate from the sandbox policy: which actions a person is asked about.

- suggest: every edit and every command is asked about.
- auto-edit: edits are applied; commands are asked about.
- full-auto: nothing is asked, but only because commands run in the sandbox; without one
  (``--sandbox none``) commands are still asked about in the REPL.
- plan: only the reading tools run; edits, commands and MCP calls are refused with a word to the
  model, which writes a plan (update_plan) that the person approves before anything changes
  (agent/planmode.py frames the task; the REPL asks and switches the mode).

MCP tool calls (kind ``mcp``) are asked about like commands in suggest and auto-edit, and "always"
covers that one tool; full-auto calls the servers the user configured without asking (they never
run in the sandbox, so it would not change anything for them).

The answers (as in Claude Code and Codex): yes; always (edits: for the rest of the session; an MCP
tool: that tool, this session; commands: an allow rule, kept in the user's config: a prefix for the
allowlisted programs, else the exact command, actions/permissions.py); no, with an optional reason the model reads; cancel (Ctrl-D or Esc), which stops the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from clovercode.actions.context import ApprovalRequest, ToolError
from clovercode.actions.permissions import allowed, command_rule

YES, NO, ALWAYS, CANCEL = "yes", "no", "always", "cancel"
VIEW = "view"  # not an answer: show the whole command, or the new file, then ask again
PLAN = "plan"
PLAN_REFUSAL = ("Plan mode: nothing may change yet, so {what} was not run. Use the reading tools "
                "(view_file, list_files, search_text), write the plan with update_plan, then answer with it: "
                "the user approves the plan before any change is made.")


@dataclass(frozen=True)
class Reply:
    answer: str  # YES, NO, ALWAYS or CANCEL
    reason: str = ""  # with NO: what the person wants instead, for the model


Ask = Callable[[ApprovalRequest], Union[str, Reply]]


class RunCancelled(KeyboardInterrupt):
    """The person cancelled the run at an approval prompt; the loop stops as interrupted."""


def needs_asking(mode: str, kind: str, sandboxed: bool) -> bool:
    if mode == "full-auto":
        return kind == "command" and not sandboxed
    if mode == "auto-edit":
        return kind in ("command", "mcp")
    return True  # suggest, and anything unknown: ask


class ModeApprover:
    """The ToolContext.approve of an interactive session. ``rules`` are command prefixes allowed
    without asking; ``remember`` keeps a new one (the REPL writes it to the user's config)."""

    def __init__(self, mode: str, sandboxed: bool, ask: Ask, rules: tuple[str, ...] | list[str] = (),
                 remember: Callable[[str], None] | None = None):
        self.mode, self.sandboxed, self.ask = mode, sandboxed, ask
        self.rules, self.remember = list(rules), remember
        self.always: set[str] = set()

    def __call__(self, request: ApprovalRequest) -> bool:
        if self.mode == PLAN:  # before any rule: an allow rule or "always" must not open plan mode up
            what = {"edit": f"the change ({request.title})", "mcp": f"the MCP tool {request.title}"}.get(
                request.kind, "the command")
            raise ToolError(PLAN_REFUSAL.format(what=what))
        rule = request.rule or request.kind
        if not needs_asking(self.mode, request.kind, self.sandboxed) or rule in self.always:
            return True
        if request.kind == "command" and allowed(request.title, self.rules):
            return True
        reply = self.ask(request)
        reply = reply if isinstance(reply, Reply) else Reply(reply)
        if reply.answer == CANCEL:
            raise RunCancelled("cancelled by the user at an approval prompt")
        if reply.answer == ALWAYS:
            if request.kind != "command":
                self.always.add(rule)
            elif (prefix := command_rule(request.title)) is not None and prefix not in self.rules:
                self.rules.append(prefix)
                if self.remember is not None:
                    self.remember(prefix)
            return True
        if reply.answer == YES:
            return True
        if reply.reason:
            what = {"command": "run this command", "mcp": f"call {request.title}"}.get(
                request.kind, f"make this change ({request.title})")
            raise ToolError(f"The user declined to {what} and said: {reply.reason}")
        return False

    def notice(self) -> str | None:
        """What a person should know about this combination, said once at the start."""
        if self.mode == "full-auto" and not self.sandboxed:
            return "approval full-auto without a sandbox: edits are applied, but commands are still asked about."
        return None


def parse_answer(text: str) -> str | None:
    word = text.strip().lower()
    if word in ("y", "yes"):
        return YES
    if word in ("n", "no", ""):
        return NO
    if word in ("a", "always"):
        return ALWAYS
    if word in ("v", "view"):
        return VIEW
    return None

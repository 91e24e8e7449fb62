"""Approval modes, separate from the sandbox policy: which actions a person is asked about.

- suggest: every edit and every command is asked about.
- auto-edit: edits are applied; commands are asked about.
- full-auto: nothing is asked, but only because commands run in the sandbox; without one
  (``--sandbox none``) commands are still asked about in the REPL.

MCP tool calls (kind ``mcp``) are asked about like commands in suggest and auto-edit, and "always"
covers that one tool; full-auto calls the servers the user configured without asking (they never
run in the sandbox, so it would not change anything for them).
"""

from __future__ import annotations

from typing import Callable

from clovercode.actions.context import ApprovalRequest

YES, NO, ALWAYS = "yes", "no", "always"
Ask = Callable[[ApprovalRequest], str]  # returns YES, NO or ALWAYS (for this kind or rule, this session)


def needs_asking(mode: str, kind: str, sandboxed: bool) -> bool:
    if mode == "full-auto":
        return kind == "command" and not sandboxed
    if mode == "auto-edit":
        return kind in ("command", "mcp")
    return True  # suggest, and anything unknown: ask


class ModeApprover:
    """The ToolContext.approve of an interactive session."""

    def __init__(self, mode: str, sandboxed: bool, ask: Ask):
        self.mode, self.sandboxed, self.ask = mode, sandboxed, ask
        self.always: set[str] = set()

    def __call__(self, request: ApprovalRequest) -> bool:
        rule = request.rule or request.kind
        if not needs_asking(self.mode, request.kind, self.sandboxed) or rule in self.always:
            return True
        answer = self.ask(request)
        if answer == ALWAYS:
            self.always.add(rule)
            return True
        return answer == YES

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
    return None

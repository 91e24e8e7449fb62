"""The approval modes as ACP session modes, switched with ``session/set_mode``, and the session's
config options (``session/set_config_option``): the same mode (category ``mode``, for clients that
show config options instead of modes; the two are kept in step) and reasoning on or off (the
``thinking`` setting, which the embedded engine and endpoints honour). There is no model option: one
process serves one model, so there is nothing to choose between.

``ask``, ``auto-edit`` and ``full-auto`` are the approval modes of actions/approval.py (``ask`` is
its ``suggest``); ``read-only`` lets the model read and search and refuses every edit, command and
MCP tool call without asking, saying so to the model. A switch takes effect at the next action,
also in a running turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from clovercode.actions.context import ApprovalRequest, ToolError
from clovercode.ground.settings import APPROVAL_MODES

READ_ONLY = "read-only"


@dataclass(frozen=True)
class Mode:
    id: str
    name: str
    description: str
    approval: str | None  # the approval mode it runs with; None: nothing that changes anything runs


MODES = (
    Mode(READ_ONLY, "Read only", "Reads and searches the project; edits, commands and MCP tools are refused", None),
    Mode("ask", "Ask", "Asks before every edit, command and MCP tool call", "suggest"),
    Mode("auto-edit", "Auto-edit", "Applies edits; asks before commands and MCP tool calls", "auto-edit"),
    Mode("full-auto", "Full auto", "Applies edits and runs commands in the sandbox without asking", "full-auto"),
) + ((Mode("plan", "Plan", "Reads and writes a plan; nothing changes until you approve it", "plan"),)
     if "plan" in APPROVAL_MODES else ())  # the approval mode the plan tool's branch (i38) adds
BY_ID = {mode.id: mode for mode in MODES}


def mode_for_approval(approval: str) -> str:
    """The mode a session starts in: the one running the configured approval mode."""
    return next((mode.id for mode in MODES if mode.approval == approval), "ask")


def mode_state(current: str) -> dict[str, object]:
    """The SessionModeState of a session/new, load or resume answer."""
    return {"currentModeId": current,
            "availableModes": [{"id": m.id, "name": m.name, "description": m.description} for m in MODES]}


def refuse_in_read_only(request: ApprovalRequest) -> None:
    what = {"command": "run commands", "mcp": "call MCP tools"}.get(request.kind, "change files")
    raise ToolError(f"This session is in read-only mode: it cannot {what}. Read and search the project, then say "
                    "what you would change; the person can switch modes in the editor.")


MODE_OPTION, REASONING_OPTION = "mode", "reasoning"
REASONING = {"on": True, "off": False}


def config_options(mode: str, thinking: bool) -> list[dict[str, object]]:
    """The SessionConfigOption list of a session, with its current values."""
    return [
        {"type": "select", "id": MODE_OPTION, "name": "Mode", "category": "mode", "currentValue": mode,
         "description": "What runs without asking", "options": [{"value": m.id, "name": m.name, "description": m.description}
                                                                 for m in MODES]},
        {"type": "select", "id": REASONING_OPTION, "name": "Reasoning", "category": "thought_level",
         "currentValue": "on" if thinking else "off", "description": "Let the model think before it acts",
         "options": [{"value": "on", "name": "On"}, {"value": "off", "name": "Off"}]},
    ]

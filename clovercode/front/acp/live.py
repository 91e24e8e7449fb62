"""One ACP session as the agent holds it: the clovercode Session, its queue to the client, its
approver and mode, the turn that runs; and the checks on the project a client names."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clovercode.front.acp.clientfs import WriteLog
from clovercode.front.acp.modes import BY_ID, READ_ONLY, config_options, refuse_in_read_only
from clovercode.front.acp.outbox import Outbox
from clovercode.front.acp.saved import TITLE_CHARS
from clovercode.front.acp.turns import Turn
from clovercode.front.acp.updates import UpdateMapper
from clovercode.actions.approval import ModeApprover
from clovercode.actions.context import ApprovalRequest
from clovercode.ground.errors import UsageError
from clovercode.wiring.session import Session


@dataclass
class LiveSession:
    id: str
    root: Path
    session: Session
    outbox: Outbox
    writes: WriteLog
    approver: ModeApprover | None = None
    mapper: UpdateMapper | None = None
    turn: Turn | None = None
    turns: int = 0
    post_update: Any = None  # set by the agent: queue one update for this session's client
    mode: str = "ask"  # the ACP mode (modes.py)
    custom: dict[str, Any] = field(default_factory=dict)  # custom slash commands offered (slash.py)
    call: Any = None  # call(method, question=False, **params): one request to the client, answered

    def switch_mode(self, mode_id: str) -> None:
        """Into mode ``mode_id`` (KeyError for no such mode), said to the client as the mode and as
        the option; from any thread."""
        mode = BY_ID[mode_id]
        self.mode = mode.id
        if self.approver is not None and mode.approval is not None:
            self.approver.mode = mode.approval
        self.post_update({"sessionUpdate": "current_mode_update", "currentModeId": mode.id})
        self.post_update({"sessionUpdate": "config_option_update", "configOptions": self.options()})

    def options(self) -> list[dict[str, Any]]:
        return config_options(self.mode, bool(self.session.cfg["thinking"]))

    def command_output(self, chunk: bytes) -> None:
        mapper = self.mapper
        if mapper is not None:
            mapper.command_output(chunk)

    def approve(self, request: ApprovalRequest) -> bool:
        """The session's approver; a call allowed (asked or not) is running from now on."""
        assert self.approver is not None
        if self.mode == READ_ONLY:
            refuse_in_read_only(request)
        allowed = self.approver(request)
        if allowed and self.mapper is not None:
            self.mapper.running()
        return allowed


class LiveApprove:
    """The session's approver as its tools see it: a call, and the mode it runs in now, so a subagent
    with write rights is refused before it starts in read-only and plan modes (subagents/rights.py)."""

    def __init__(self, live: LiveSession):
        self.live = live

    def __call__(self, request: ApprovalRequest) -> bool:
        return self.live.approve(request)

    @property
    def mode(self) -> str | None:
        if self.live.mode == READ_ONLY:
            return READ_ONLY
        return getattr(self.live.approver, "mode", None)


def project_of(cwd: str) -> Path:
    path = Path(cwd)
    if "\x00" in cwd or not path.is_absolute():
        raise UsageError(f"cwd must be an absolute path, not {cwd[:200]!r}")
    if not path.is_dir():
        raise UsageError(f"project directory not found: {cwd[:200]}")
    resolved = path.resolve()
    if resolved == Path(resolved.anchor):
        raise UsageError(f"{cwd} is the root of the filesystem, not a project",
                         hint="Open a project folder in the editor; clovercode works inside the folder it is given.")
    return resolved


def live_title(live: LiveSession) -> str:
    goals = [m.content for m in live.session.conversation.messages if m.role == "user" and "goal" in m.tags]
    first = " ".join(goals[0].split("\n")[0].split()) if goals else ""
    return first[:TITLE_CHARS] or live.id

"""For tests/test_acp.py: an editor made of the official Python SDK's client side, and a checker of
every JSON-RPC message against the protocol's published JSON Schema (tests/data/acp/SOURCE.md)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from acp import RequestError
from acp.connection import StreamDirection, StreamEvent
from acp.schema import AllowedOutcome, DeniedOutcome, ReadTextFileResponse, RequestPermissionResponse, WriteTextFileResponse

SCHEMA_FILE = Path(__file__).parent / "data" / "acp" / "schema-v1.19.0.json"

# The stable methods and the schema's definitions of their params and results. A message whose
# method is not listed fails the check: nothing crosses the wire unvalidated.
METHODS = {
    "initialize": ("InitializeRequest", "InitializeResponse"),
    "session/new": ("NewSessionRequest", "NewSessionResponse"),
    "session/load": ("LoadSessionRequest", "LoadSessionResponse"),
    "session/prompt": ("PromptRequest", "PromptResponse"),
    "session/cancel": ("CancelNotification", None),
    "session/update": ("SessionNotification", None),
    "session/request_permission": ("RequestPermissionRequest", "RequestPermissionResponse"),
    "fs/read_text_file": ("ReadTextFileRequest", "ReadTextFileResponse"),
    "fs/write_text_file": ("WriteTextFileRequest", "WriteTextFileResponse"),
    "session/list": ("ListSessionsRequest", "ListSessionsResponse"),
    "session/resume": ("ResumeSessionRequest", "ResumeSessionResponse"),
    "session/close": ("CloseSessionRequest", "CloseSessionResponse"),
    "session/delete": ("DeleteSessionRequest", "DeleteSessionResponse"),
    "session/set_mode": ("SetSessionModeRequest", "SetSessionModeResponse"),
    "session/set_config_option": ("SetSessionConfigOptionRequest", "SetSessionConfigOptionResponse"),
    "$/cancel_request": ("CancelRequestNotification", None),
}


class SchemaChecker:
    """A StreamObserver for the client's connection: keeps every message, checks them on demand."""

    def __init__(self) -> None:
        self.schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
        self.messages: list[tuple[str, dict[str, Any]]] = []  # (sender: "agent" | "client", message)
        self.raw_ids: list[Any] = []  # the ids the agent answers lines that were no valid message with

    def __call__(self, event: StreamEvent) -> None:
        sender = "agent" if event.direction is StreamDirection.INCOMING else "client"
        self.messages.append((sender, event.message))

    def _validator(self, schema: dict[str, Any]) -> Draft202012Validator:
        return Draft202012Validator({"$defs": self.schema["$defs"], **schema})

    def problems(self) -> list[str]:
        envelopes = {"agent": self._validator(self.schema["anyOf"][0]), "client": self._validator(self.schema["anyOf"][1])}
        defs = {name: self._validator({"$ref": f"#/$defs/{name}"}) for pair in METHODS.values() for name in pair if name}
        asked: dict[tuple[str, Any], str] = {}  # (who asked, id) -> method
        found: list[str] = []
        raw_ids = list(self.raw_ids)
        for sender, message in self.messages:
            where = f"{sender} {json.dumps(message)[:300]}"
            found += [f"{where}: envelope: {e.message}" for e in envelopes[sender].iter_errors(message)]
            if "method" in message:
                method = message["method"]
                if method not in METHODS:
                    found.append(f"{where}: method {method!r} is not one this test knows to check")
                    continue
                found += [f"{where}: params: {e.message}" for e in defs[METHODS[method][0]].iter_errors(message.get("params"))]
                if "id" in message:
                    asked[(sender, message["id"])] = method
            else:
                asker = "client" if sender == "agent" else "agent"
                method = asked.pop((asker, message.get("id")), None)
                if method is None and sender == "agent" and "error" in message and message.get("id") in raw_ids:
                    raw_ids.remove(message.get("id"))  # the answer to an invalid line
                    continue
                if method is None:
                    found.append(f"{where}: answers no request")
                elif "result" in message and METHODS[method][1]:
                    found += [f"{where}: result: {e.message}" for e in defs[METHODS[method][1]].iter_errors(message["result"])]
        found += [f"request {method} ({who}, id {ident}) never answered" for (who, ident), method in asked.items()]
        found += [f"an invalid line (answer id {ident!r}) was never answered" for ident in raw_ids]
        return found

    def methods(self) -> set[str]:
        return {m["method"] for _, m in self.messages if "method" in m}


class Editor:
    """The SDK's Client protocol as an editor would answer it: buffers that differ from the disk,
    permission answers given in order, and a cancel sent once a marker command is seen running."""

    def __init__(self, buffers: dict[str, str] | None = None, answers: list[str] | None = None,
                 cancel_when: Path | None = None):
        self.buffers = dict(buffers or {})
        self.answers = list(answers or [])
        self.cancel_when = cancel_when  # cancel the prompt once this file exists (the command is running)
        self.updates: list[Any] = []
        self.permission_requests: list[Any] = []
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []
        self.conn: Any = None
        self.session_id: str | None = None
        self.cancel_task: asyncio.Task[None] | None = None

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def request_permission(self, options: list[Any], session_id: str, tool_call: Any, **_: Any) -> RequestPermissionResponse:
        self.permission_requests.append((tool_call, options))
        if not self.answers:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.answers.pop(0)))

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update)
        if (self.cancel_when is not None and self.cancel_task is None
                and getattr(update, "session_update", "") == "tool_call_update" and update.status == "in_progress"):
            self.cancel_task = asyncio.ensure_future(self._cancel_once_running(session_id))

    async def _cancel_once_running(self, session_id: str) -> None:
        assert self.cancel_when is not None
        for _ in range(600):  # the command writes the marker as its first act
            if self.cancel_when.exists():
                break
            await asyncio.sleep(0.05)
        await self.conn.cancel(session_id=session_id)

    async def read_text_file(self, path: str, session_id: str, limit: int | None = None, line: int | None = None,
                             **_: Any) -> ReadTextFileResponse:
        self.reads.append(path)
        if path in self.buffers:
            return ReadTextFileResponse(content=self.buffers[path])
        try:
            return ReadTextFileResponse(content=Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise RequestError.resource_not_found(path) from exc

    async def write_text_file(self, content: str, path: str, session_id: str, **_: Any) -> WriteTextFileResponse:
        self.writes.append((path, content))
        self.buffers[path] = content
        return WriteTextFileResponse()

    def of(self, kind: str) -> list[Any]:
        return [u for u in self.updates if getattr(u, "session_update", None) == kind]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for u in self.of(kind) if getattr(u.content, "type", "") == "text")

"""The ACP agent: the protocol's requests (from the official SDK's router) onto clovercode's sessions.

Each ACP session is one clovercode Session (session.py), opened as the REPL opens one: the project is
the client's ``cwd``, its configuration loaded with the flags of ``clovercode acp`` and the same
trust rules, the same backend, sandbox, approvals, hooks, budgets and trajectories. Only how events
are shown (updates.py) and how approvals are asked (permissions.py) differ: a front end, not a loop.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from clovercode.front.acp.clientfs import ClientFiles, WriteLog
from clovercode.front.acp.content import prompt_text
from clovercode.front.acp.firstline import Handoff
from clovercode.front.acp.handshake import initialize_result
from clovercode.front.acp.history import history_updates
from clovercode.front.acp import saved as saved_sessions
from clovercode.front.acp.live import LiveApprove, LiveSession, live_title, project_of
from clovercode.front.acp.mcp import join_client_servers
from clovercode.front.acp.modes import (BY_ID, MODE_OPTION, READ_ONLY, REASONING, REASONING_OPTION,
                                        mode_for_approval, mode_state)
from clovercode.front.acp.outbox import Outbox
from clovercode.front.acp.permissions import ClientAsk
from clovercode.front.acp.planflow import PLAN, run_planned
from clovercode.front.acp.slash import BUILTIN, available, custom_commands, parse, run_builtin, usage
from clovercode.front.acp.stdio import open_streams
from clovercode.front.acp.transport import CheckedTransport
from clovercode.front.acp.turns import Turn, stop_reason
from clovercode.front.acp.updates import UpdateMapper
from clovercode.actions.approval import ModeApprover
from clovercode.actions.fileio import DiskFiles
from clovercode.agent.trajectory import new_trajectory_path
from clovercode.backends.base import ModelBackend
from clovercode.backends.registry import open_backend
from clovercode.ground.config import Config, load_config
from clovercode.ground.errors import CloverError, UsageError
from clovercode.executors.select import NO_SANDBOX_WARNING
from clovercode.wiring.session import Session, open_session, trajectory_dir
from clovercode.ground.taskinput import check_task

from acp import RequestError, run_agent
from acp.schema import (CloseSessionResponse, InitializeResponse, ListSessionsResponse, LoadSessionResponse,
                        NewSessionResponse, PromptResponse, ResumeSessionResponse, SessionModeState, SessionNotification,
                        SetSessionConfigOptionResponse, SetSessionModeResponse)

NOT_FOUND = -32002  # ACP's "resource not found": an unknown session
STOP_WAIT = 10.0  # seconds a running turn gets to stop (kill its command, close its trajectory) at exit


def _error(exc: CloverError) -> RequestError:
    """A person's error (bad cwd, a config mistake, no sandbox) as the JSON-RPC error a client shows."""
    # The hint is in the message too: editors show the message, not the data.
    message = f"{exc.message}. {exc.hint}" if exc.hint else exc.message
    code = NOT_FOUND if isinstance(exc, saved_sessions.SessionNotFound) else -32602 if isinstance(exc, UsageError) else -32603
    return RequestError(code, message,
                        {"hint": exc.hint} if exc.hint else None)


@dataclass
class CloverAgent:
    """The SDK's Agent protocol (acp.interfaces.Agent): what clovercode answers."""

    flags: Mapping[str, Any]
    trust_project: bool = False
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    conn: Any = None
    fs_read: bool = False
    fs_write: bool = False
    sessions: dict[str, LiveSession] = field(default_factory=dict)
    backends: dict[tuple[str, str], ModelBackend] = field(default_factory=dict)

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None,
                         **_: Any) -> InitializeResponse:
        fs = getattr(client_capabilities, "fs", None)
        self.fs_read = bool(getattr(fs, "read_text_file", False))
        self.fs_write = bool(getattr(fs, "write_text_file", False))
        # The same answer the first-line reader gives before the SDK has loaded (handshake.py).
        return InitializeResponse.model_validate(initialize_result())

    async def new_session(self, cwd: str, mcp_servers: list[Any] | None = None, **_: Any) -> NewSessionResponse:
        live = await self._open(cwd, mcp_servers or [], None)
        return NewSessionResponse(session_id=live.id, modes=self._modes(live), config_options=self._options(live))

    async def load_session(self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None,
                           **_: Any) -> LoadSessionResponse:
        live = await self._open(cwd, mcp_servers or [], session_id)
        for update in history_updates(live.session.conversation.messages, live.root):
            live.post_update(update)
        await live.outbox.flush()  # the spec: answer once every entry of the conversation has been sent
        return LoadSessionResponse(modes=self._modes(live), config_options=self._options(live))

    async def resume_session(self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None,
                             **_: Any) -> ResumeSessionResponse:
        """session/load without the replay: the editor keeps its own copy of the conversation."""
        live = await self._open(cwd, mcp_servers or [], session_id)
        return ResumeSessionResponse(modes=self._modes(live), config_options=self._options(live))

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None, **_: Any) -> ListSessionsResponse:
        def listing() -> saved_sessions.Page:
            root = project_of(cwd) if cwd is not None else None
            cfg = load_config(root, self.env, self.flags, self.trust_project)
            return saved_sessions.page(trajectory_dir(cfg, self.env), root, cursor)

        try:
            found = await asyncio.to_thread(listing)
        except CloverError as exc:
            raise _error(exc) from None
        return ListSessionsResponse.model_validate({"sessions": found.sessions, "nextCursor": found.next_cursor})

    async def close_session(self, session_id: str, **_: Any) -> CloseSessionResponse:
        """Cancel what runs (as session/cancel), then let go of the session's servers and queue."""
        live = self._live(session_id)
        await self._close(live)
        return CloseSessionResponse()

    async def delete_session(self, params: dict[str, Any]) -> dict[str, Any]:
        """session/delete (the SDK does not route it; transport.py does): the session's trajectories
        are removed, so neither session/list nor --resume offers it again. An open one is closed first."""
        ident = params.get("sessionId")
        if not isinstance(ident, str):
            raise RequestError(-32602, "Invalid params: sessionId must be a string")
        live = self.sessions.get(ident)
        if live is not None:
            await self._close(live)

        def deleting() -> None:
            cfg = load_config(None, self.env, self.flags, self.trust_project)
            saved_sessions.delete(trajectory_dir(cfg, self.env), ident)

        try:
            await asyncio.to_thread(deleting)
        except CloverError as exc:
            raise _error(exc) from None
        return {}

    async def set_session_mode(self, mode_id: str, session_id: str, **_: Any) -> SetSessionModeResponse:
        live = self._live(session_id)
        self._switch_mode(live, mode_id)
        await live.outbox.flush()
        return SetSessionModeResponse()

    async def set_config_option(self, config_id: str, session_id: str, value: Any, **_: Any) -> SetSessionConfigOptionResponse:
        live = self._live(session_id)
        if config_id == MODE_OPTION and isinstance(value, str):
            self._switch_mode(live, value)
        elif config_id == REASONING_OPTION and value in REASONING:
            # read at the next task (session.generation_params), as a flag would set it
            live.session.cfg = live.session.cfg.with_overrides({"thinking": REASONING[value]}, "the editor")
        else:
            raise RequestError(-32602, f"no value {value!r} for option {config_id!r}; "
                               f"the options are {', '.join(str(o['id']) for o in live.options())}")
        await live.outbox.flush()
        return SetSessionConfigOptionResponse(config_options=self._options(live))

    def _switch_mode(self, live: LiveSession, mode_id: str) -> None:
        if mode_id not in BY_ID:
            raise RequestError(-32602, f"no mode {mode_id!r}; the modes are {', '.join(BY_ID)}")
        live.switch_mode(mode_id)

    def _modes(self, live: LiveSession) -> SessionModeState:
        return SessionModeState.model_validate(mode_state(live.mode))

    def _options(self, live: LiveSession) -> Any:
        return SetSessionConfigOptionResponse.model_validate({"configOptions": live.options()}).config_options

    async def _close(self, live: LiveSession) -> None:
        if live.turn is not None:
            live.turn.cancel()
            live.outbox.drop_question()
            await asyncio.to_thread(live.turn.stop, STOP_WAIT)
        self.sessions.pop(live.id, None)
        if live.session.mcp is not None:
            await asyncio.to_thread(live.session.mcp.close)
        await live.outbox.close()

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        live = self._live(session_id)
        if live.turn is not None:
            raise RequestError(-32600, "this session is already running a prompt; cancel it or wait for its answer")
        try:
            task = check_task(prompt_text(prompt, live.root)).strip("\n")  # the REPL's and exec's one rule (taskinput.py)
        except CloverError as exc:
            raise _error(exc) from None
        slash = parse(task)
        if slash is not None and slash.name in BUILTIN:
            return await self._builtin(live, slash)
        if slash is not None and slash.name in live.custom:
            task = live.custom[slash.name].task(slash.argument)
        live.turns += 1
        live.mapper = UpdateMapper(live.root, live.post_update, live.writes, prefix=f"t{live.turns}-")
        live.turn = Turn()
        try:
            work = (lambda: run_planned(live, task)) if live.mode == PLAN else (lambda: live.session.run_task(task, live.mapper))
            result = await live.turn.run(work)
        except CloverError as exc:  # e.g. the sandbox stopped working: this turn fails, the session stays
            raise _error(exc) from None
        finally:
            self._after_turn(live)
            await live.outbox.flush()  # every update of the turn reaches the client before its answer
            live.turn = live.mapper = None
        if result is None:  # cancelled before the loop could report it (while the prompt was being built)
            return PromptResponse(stop_reason="cancelled")
        reason = stop_reason(result.stop.value)
        if reason is None:
            raise RequestError(-32603, result.detail)
        return PromptResponse(stop_reason=reason)

    async def _builtin(self, live: LiveSession, slash: Any) -> PromptResponse:
        live.turn = Turn()  # a second prompt meanwhile is refused as during a task
        try:
            text = await asyncio.to_thread(run_builtin, slash, live.session, live.mode, live.mode in (READ_ONLY, PLAN))
        except CloverError as exc:
            text = f"/{slash.name} failed: {exc.message}"
        finally:
            live.turn = None
        live.post_update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
        self._after_turn(live)
        await live.outbox.flush()
        return PromptResponse(stop_reason="end_turn")

    def _after_turn(self, live: LiveSession) -> None:
        """How full the window is, and the session's title (its first task) with the time of this turn."""
        window = usage(live.session, live.mapper.model_window if live.mapper is not None else None)
        if window is not None:
            live.post_update(window)
        live.post_update({"sessionUpdate": "session_info_update", "title": live_title(live),
                          "updatedAt": saved_sessions.updated_at(time.time())})

    def answered(self, method: str, params: Any, message: dict[str, Any]) -> None:
        """After a session's opening answer is written (transport.py): its commands, which a client
        could not place before it knew the session."""
        if method not in ("session/new", "session/load", "session/resume") or "result" not in message:
            return
        ident = message["result"].get("sessionId") or (params or {}).get("sessionId")
        live = self.sessions.get(ident) if isinstance(ident, str) else None
        if live is not None:
            live.post_update({"sessionUpdate": "available_commands_update", "availableCommands": available(live.custom)})

    async def cancel_prompt(self, session_id: str) -> None:
        """``$/cancel_request`` for a running session/prompt (transport.py): the same as session/cancel."""
        await self.cancel(session_id)

    async def cancel(self, session_id: str, **_: Any) -> None:
        live = self.sessions.get(session_id)
        if live is not None and live.turn is not None:
            live.turn.cancel()
            live.outbox.drop_question()

    def _live(self, session_id: str) -> LiveSession:
        live = self.sessions.get(session_id)
        if live is None:
            raise RequestError(NOT_FOUND, f"no session {session_id} in this clovercode process "
                               "(session/load or session/resume continues a saved one)")
        return live

    async def _open(self, cwd: str, mcp_servers: list[Any], load: str | None) -> LiveSession:
        loop = asyncio.get_running_loop()
        outbox = Outbox(loop)
        try:  # loading a model and starting MCP servers take a while: off the event loop
            live = await asyncio.to_thread(self._open_blocking, cwd, mcp_servers, load, outbox)
        except CloverError as exc:
            raise _error(exc) from None
        old = self.sessions.get(live.id)
        if old is not None:  # loaded again in this process: the new one replaces it, unless it is busy
            stale = live if old.turn is not None else old
            if stale.session.mcp is not None:
                await asyncio.to_thread(stale.session.mcp.close)
            if stale is live:
                raise RequestError(-32600, f"session {live.id} is running a prompt; cancel it first")
            await old.outbox.close()
        outbox.start()
        self.sessions[live.id] = live
        return live

    def _open_blocking(self, cwd: str, mcp_servers: list[Any], load: str | None, outbox: Outbox) -> LiveSession:
        root = project_of(cwd)
        cfg = join_client_servers(load_config(root, self.env, self.flags, self.trust_project), mcp_servers, root, self.env)
        backend = self._backend(cfg)
        session = open_session(root, cfg, interactive=True, backend=backend, env=self.env)
        try:
            return self._wire(session, cfg, root, load, outbox)
        except BaseException:
            if session.mcp is not None:
                session.mcp.close()
            raise

    def _wire(self, session: Session, cfg: Config, root: Path, load: str | None, outbox: Outbox) -> LiveSession:
        if load is None:
            session.next_trajectory = new_trajectory_path(trajectory_dir(cfg, self.env), "acp")
            session.session_id = session.next_trajectory.stem  # the ACP session id is the first task's trajectory id
        else:
            _load_into(session, cfg, root, load, self.env)
        assert session.session_id is not None
        sid = session.session_id
        conn = self.conn

        def call(method: str, question: bool = False, **params: Any) -> Any:
            return outbox.call(lambda: getattr(conn, method)(**params), question=question)

        both = self.fs_read and self.fs_write  # one without the other would see stale text after its own edits
        writes = WriteLog(ClientFiles(call, sid) if both else DiskFiles())
        live = LiveSession(sid, root, session, outbox, writes, mode=mode_for_approval(cfg["approval"]),
                           custom=custom_commands(session), call=call)

        def post_update(update: dict[str, Any]) -> None:
            model = SessionNotification.model_validate({"sessionId": sid, "update": update}).update
            outbox.post(lambda: conn.session_update(session_id=sid, update=model))

        live.post_update = post_update
        ask = ClientAsk(sid, call, lambda: live.mapper.current if live.mapper is not None else None, root)
        live.approver = ModeApprover(cfg["approval"], cfg["sandbox"] != "none", ask, cfg["permissions.allow"],
                                     lambda prefix: _remember(prefix, self.env, session))
        session.approve = LiveApprove(live)  # with the mode: a writing subagent is refused in read-only and plan
        session.command_output = live.command_output
        session.files = writes
        if cfg["sandbox"] == "none":
            session.notices.insert(0, ("sandbox", NO_SANDBOX_WARNING))
        if live.approver.notice():
            session.notices.append(("approval", live.approver.notice() or ""))
        return live

    def _backend(self, cfg: Config) -> ModelBackend:
        """One model per process: sessions of one editor share it (the user's model; no project picks one)."""
        key = (str(cfg["model"]), str(cfg["endpoint"]))
        if key not in self.backends:
            self.backends[key] = open_backend(cfg, base_dir=Path.cwd())
        return self.backends[key]

    def close(self) -> None:
        for live in self.sessions.values():
            if live.turn is not None:  # the editor closed the connection mid-turn: stop it as Ctrl-C would
                live.turn.stop(wait=STOP_WAIT)
        for live in self.sessions.values():
            if live.session.mcp is not None:
                live.session.mcp.close()
        for backend in self.backends.values():
            backend.close()


def _load_into(session: Session, cfg: Config, root: Path, ident: str, env: Mapping[str, str]) -> None:
    saved = saved_sessions.find(trajectory_dir(cfg, env), ident, root)
    session.conversation.messages[:] = saved.messages
    session.session_id = saved.session_id


def _remember(prefix: str, env: Mapping[str, str], session: Session) -> None:
    """An "always" for a command: the REPL's rule in the user's config, so it holds in every front end."""
    from clovercode.front.repl.permissions import add_rule

    try:
        add_rule(env, prefix)
    except CloverError as exc:
        session.notices.append(("permissions", f"the rule `{prefix}` holds for this session only: {exc}"))


async def serve(agent: CloverAgent, protocol_out: Any, handoff: Handoff) -> None:
    """Speak ACP on stdin (after what the first-line reader took) and ``protocol_out`` until the
    client closes stdin."""
    reader, writer = await open_streams(handoff.prefix, protocol_out)
    transport = CheckedTransport(reader, writer, agent.cancel_prompt, {"session/delete": agent.delete_session},
                                 agent.answered, answered_early=handoff.answered)
    try:
        # close and resume are "unstable" to SDK 0.12.1 but stable in the schema it was made from (v1.19)
        await run_agent(agent, transport, use_unstable_protocol=True)
    finally:
        await asyncio.to_thread(agent.close)

"""NDJSON on stdio, every line checked before the SDK's connection sees it.

The client is outside clovercode's control, and one bad line must not end the conversation (or the
turn that is running). So each line is judged here, at the one seam every message passes, and a line
that is not a JSON-RPC 2.0 message gets the error JSON-RPC names for it (``-32700`` for bytes that are
not UTF-8 JSON, ``-32600`` for JSON that is not a request, notification or response), answered with
the request's id when it has a usable one and ``null`` otherwise. The connection stays open.

An ``initialize`` the first-line reader already answered (firstline.py) comes first, under a private
id, so the SDK's connection and the agent take it as they take any; its second answer is compared
with the first and not written.

Three things the SDK (0.12.1) does not do are done here too: requests other than ``initialize`` are
refused until an ``initialize`` has come; ``$/cancel_request`` for a running ``session/prompt``
cancels it (the prompt then answers ``cancelled``); methods the SDK does not route (``extra``) are
answered by the agent's own coroutines.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any, Awaitable, Callable

from acp import RequestError

from clovercode.front.acp.handshake import answer_message

# The notifications a client sends an agent (ACP v1); any other is ignored, not handed to the SDK (which
# logged a traceback for an unknown one).
CLIENT_NOTIFICATIONS = frozenset({"session/cancel"})
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
MAX_PROTOCOL_VERSION = 65535  # ProtocolVersion is a uint16
NOT_INITIALIZED = "send initialize first: the connection is not initialized"

Extra = Callable[[dict[str, Any]], Awaitable[Any]]
Answered = Callable[[str, Any, dict[str, Any]], None]  # (method, params, the answer) once it is written


def _usable_id(message: dict[str, Any]) -> tuple[bool, Any]:
    """(whether ``id`` is a JSON-RPC id: a string, an integer or null; the id to answer with)."""
    if "id" not in message:
        return True, None
    ident = message["id"]
    if ident is None or isinstance(ident, str) or (isinstance(ident, int) and not isinstance(ident, bool)):
        return True, ident
    return False, None


def problem(message: Any) -> tuple[int, str] | None:
    """Why ``message`` (decoded JSON) is no JSON-RPC 2.0 message ACP takes; None when it is one."""
    if not isinstance(message, dict):
        kind = "a batch (an array)" if isinstance(message, list) else type(message).__name__.replace("NoneType", "null")
        return INVALID_REQUEST, f"Invalid request: a message must be a JSON object, not {kind}"
    if message.get("jsonrpc") != "2.0":
        return INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0"'
    if not _usable_id(message)[0]:
        return INVALID_REQUEST, "Invalid request: an id must be a string, an integer or null"
    if "method" in message:
        if not isinstance(message["method"], str):
            return INVALID_REQUEST, "Invalid request: method must be a string"
        if "params" in message and not isinstance(message["params"], (dict, type(None))):
            return INVALID_REQUEST, "Invalid request: params must be an object"
        return None
    if "id" not in message or ("result" in message) == ("error" in message):
        return INVALID_REQUEST, "Invalid request: neither a request (method) nor a response (id with result or error)"
    return None


def params_problem(method: str, params: Any) -> str | None:
    """Checks the SDK's models are too lenient for (pydantic would take "1" as protocol version 1)."""
    if method == "initialize" and isinstance(params, dict):
        version = params.get("protocolVersion")
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= MAX_PROTOCOL_VERSION:
            return f"Invalid params: protocolVersion must be an integer from 0 to {MAX_PROTOCOL_VERSION}"
    return None


class CheckedTransport:
    """The SDK's Transport (acp._transport.Transport): ``receive`` hands on only well-formed messages."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 cancel_prompt: Callable[[str], Awaitable[None]], extra: dict[str, Extra] | None = None,
                 answered: Answered | None = None, answered_early: dict[str, Any] | None = None):
        self.reader, self.writer = reader, writer
        self.replay: list[bytes] = []  # lines the connection reads before the reader's
        self.early: tuple[str, dict[str, Any]] | None = None  # (private id, the answer already written)
        if answered_early is not None:
            # no client can reuse an id it never saw, so the SDK's answer is told apart from any other
            private = f"clovercode-early-{uuid.uuid4().hex}"
            self.early = private, answer_message(answered_early["id"])
            self.replay.append(json.dumps({**answered_early, "id": private}).encode("utf-8") + b"\n")
        self.cancel_prompt = cancel_prompt
        self.extra = dict(extra or {})
        self.answered = answered
        self.open_requests: dict[Any, tuple[str, Any]] = {}  # the client's requests not answered yet
        self.write_lock = asyncio.Lock()
        self.initialized = False  # an initialize request with good params has come
        # a running session/prompt's request id -> its sessions: a client may reuse an id while the prompt
        # runs (another request answered under it must not make the prompt uncancellable)
        self.prompts: dict[Any, list[str]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def send(self, message: dict[str, Any]) -> None:
        if self.early is not None and "method" not in message and message.get("id") == self.early[0]:
            self._drop_second_answer(message)
            return
        request = None
        if "method" not in message:
            request = self.open_requests.pop(message.get("id"), None)
            self._prompt_answered(message, request)
        # A lone surrogate (JSON's "\ud800", echoed in an id, or in a file's text) cannot be UTF-8; it
        # can only sit inside a JSON string, where backslashreplace writes it as the same escape.
        data = (json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")
        async with self.write_lock:
            self.writer.write(data)
            await self.writer.drain()
        if request is not None and self.answered is not None:
            self.answered(request[0], request[1], message)

    def _drop_second_answer(self, message: dict[str, Any]) -> None:
        assert self.early is not None
        private, written = self.early
        self.early = None
        self.open_requests.pop(private, None)
        if {**message, "id": written["id"]} != written:  # tests/test_acp_handshake.py keeps this from happening
            logging.error("clovercode answered initialize with %s before the SDK loaded, but the SDK answers %s",
                          json.dumps(written)[:2000], json.dumps(message)[:2000])

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._line()
            if line is None:
                return None
            message = await self._judge(line)
            if message is not None:
                return message

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        try:
            self.writer.close()
        except Exception:  # the client already went away
            logging.debug("closing the protocol stream failed", exc_info=True)

    async def _line(self) -> bytes | None:
        """The next non-empty line; None at the end of input. A line over the reader's limit is
        skipped to its end and answered as a parse error (nothing of it was understood)."""
        if self.replay:
            return self.replay.pop(0)
        while True:
            try:
                line = await self.reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                line = exc.partial
                if not line.strip():
                    return None
            except asyncio.LimitOverrunError:
                await self._skip_long_line()
                await self._error(None, PARSE_ERROR, "Parse error: the line is longer than clovercode reads")
                continue
            if line.strip():
                return line

    async def _skip_long_line(self) -> None:
        while True:
            try:
                await self.reader.readuntil(b"\n")
                return
            except asyncio.LimitOverrunError as exc:
                await self.reader.readexactly(exc.consumed)
            except asyncio.IncompleteReadError:
                return

    async def _judge(self, line: bytes) -> dict[str, Any] | None:
        try:
            message = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            await self._error(None, PARSE_ERROR, "Parse error: the line is not UTF-8")
            return None
        except ValueError as exc:
            await self._error(None, PARSE_ERROR, f"Parse error: {exc}")
            return None
        except RecursionError:  # valid JSON nested deeper than the parser recurses: the attack, not a message
            await self._error(None, PARSE_ERROR, "Parse error: the JSON is nested too deeply")
            return None
        found = problem(message)
        if found is not None:  # answered even without an id: it is no valid notification either
            ident = _usable_id(message)[1] if isinstance(message, dict) and "method" in message else None
            await self._error(ident, *found)
            return None
        method, ident = message.get("method"), message.get("id")
        if method is None:
            return message  # a response to one of the agent's requests
        params = message.get("params")
        if "id" not in message:
            return await self._notification(message, method, params)
        if not self.initialized and method != "initialize":
            await self._error(ident, INVALID_REQUEST, f"Invalid request: {NOT_INITIALIZED}")
            return None
        found_params = params_problem(method, params)
        if found_params is not None:
            await self._error(ident, INVALID_PARAMS, found_params)
            return None
        if method == "initialize":
            self.initialized = True  # a client may send its next request before this one's answer
        elif method == "session/prompt" and isinstance(params, dict) and isinstance(params.get("sessionId"), str):
            self.prompts.setdefault(ident, []).append(params["sessionId"])
        self.open_requests[ident] = (method, params)
        if method in self.extra:
            self._spawn(self._run_extra(ident, method, params or {}))
            return None
        return message

    async def _notification(self, message: dict[str, Any], method: str, params: Any) -> dict[str, Any] | None:
        if method == "$/cancel_request":
            request = params.get("requestId") if isinstance(params, dict) else None
            for session in self.prompts.get(request, []) if request is not None else []:
                self._spawn(self.cancel_prompt(session))
            return None  # other requests finish quickly; the spec lets a receiver ignore the rest
        if method not in CLIENT_NOTIFICATIONS or not self.initialized:
            # "$/…" protocol notifications, an extension's, a newer protocol's: a receiver may ignore them
            logging.debug("ignored the notification %r", method[:100])
            return None
        return message

    def _prompt_answered(self, message: dict[str, Any], request: tuple[str, Any] | None) -> None:
        """Forget a prompt once its own answer goes out (a stop reason, or an error to a prompt)."""
        ident = message.get("id")
        sessions = self.prompts.get(ident)
        if not sessions:
            return
        result = message.get("result")
        if (isinstance(result, dict) and "stopReason" in result) or (
                "error" in message and request is not None and request[0] == "session/prompt"):
            sessions.pop(0)
            if not sessions:
                del self.prompts[ident]

    async def _run_extra(self, ident: Any, method: str, params: dict[str, Any]) -> None:
        try:
            result = await self.extra[method](params)
        except RequestError as exc:
            await self.send({"jsonrpc": "2.0", "id": ident, "error": exc.to_error_obj()})
        except Exception as exc:
            logging.exception("%s failed", method)
            await self._error(ident, INTERNAL_ERROR, f"{method} failed: {exc}")
        else:
            await self.send({"jsonrpc": "2.0", "id": ident, "result": result if result is not None else {}})

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _error(self, ident: Any, code: int, message: str) -> None:
        await self.send({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}})

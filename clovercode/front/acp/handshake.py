"""The answer to ``initialize``, and which first lines may be answered before the SDK has loaded.

The SDK's import alone (its generated pydantic models) takes about half a second, longer than an
editor should wait for the handshake (issue 49). What clovercode answers to ``initialize`` does not
depend on the request, so it is one dict here, standard library only: the SDK path
(``server.CloverAgent.initialize``) builds its response from it, and ``firstline`` writes it for a
first line that is plainly a valid ``initialize`` before the SDK is there.

"Plainly valid" is an allowlist: only the fields of ACP v1's InitializeRequest that editors send,
each of the exact JSON type the schema gives it. Anything else (an unstable capability, a string
where a boolean goes, a float id, a notification, a malformed line) is not judged here at all: the
line goes to the SDK's connection as it came, which answers as it always did.
"""

from __future__ import annotations

import json
from typing import Any

from clovercode import __version__

PROTOCOL_VERSION = 1  # the SDK's acp.PROTOCOL_VERSION (tests/test_acp_handshake.py holds them equal)
MAX_PROTOCOL_VERSION = 65535  # ProtocolVersion is a uint16
MAX_ID = 2**53 - 1  # an id an editor's JSON numbers (doubles) hold exactly; a larger one goes to the SDK


def initialize_result() -> dict[str, Any]:
    """The ``result`` clovercode answers to every well-formed ``initialize`` (camelCase, as on the wire)."""
    return {
        # The one version clovercode speaks: the same when asked for it, else the latest it supports
        # (the spec's rule; 0 was the pre-release protocol, not an older version of this one).
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": True,  # a saved session (its trajectory) is replayed and continued
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": True, "sse": False},
            "sessionCapabilities": {"list": {}, "delete": {}, "resume": {}, "close": {}},
        },
        "authMethods": [],
        "agentInfo": {"name": "clovercode", "title": "clovercode", "version": __version__},
    }


def answer_message(ident: int | str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": initialize_result()}


def answer_line(ident: int | str) -> bytes:
    """The whole response line, written as the transport writes the SDK's (transport.CheckedTransport.send)."""
    return (json.dumps(answer_message(ident), separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")


def _text(value: Any) -> bool:
    """A JSON string that is also valid UTF-8 (JSON's ``"\\ud800"`` is not)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _meta(value: Any) -> bool:
    return value is None or isinstance(value, dict)  # the schema's _meta: any object, or absent


def _object(value: Any, fields: dict[str, Any]) -> bool:
    """``value`` is an object with only the listed keys, each passing its check."""
    return isinstance(value, dict) and all(key in fields and fields[key](item) for key, item in value.items())


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


_FS = {"readTextFile": _flag, "writeTextFile": _flag, "_meta": _meta}
_CAPABILITIES = {"fs": lambda v: _object(v, _FS), "terminal": _flag, "_meta": _meta}
_INFO = {"name": _text, "title": lambda v: v is None or _text(v), "version": _text, "_meta": _meta}
_PARAMS = {
    "protocolVersion": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_PROTOCOL_VERSION,
    "clientCapabilities": lambda v: _object(v, _CAPABILITIES),
    "clientInfo": lambda v: v is None or (_object(v, _INFO) and "name" in v and "version" in v),
    "_meta": _meta,
}


def _id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return (isinstance(value, int) and abs(value) <= MAX_ID) or (_text(value) and len(value) <= 256)


def plain_initialize(line: bytes) -> dict[str, Any] | None:
    """The request in ``line`` when it is plainly a valid ``initialize`` (see the module's docstring), else None."""
    try:
        message = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or set(message) != {"jsonrpc", "id", "method", "params"}:
        return None
    if message["jsonrpc"] != "2.0" or message["method"] != "initialize" or not _id(message["id"]):
        return None
    params = message["params"]
    if not _object(params, _PARAMS) or "protocolVersion" not in params:
        return None
    return message

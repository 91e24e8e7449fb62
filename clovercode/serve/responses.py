"""OpenAI's Responses API (``POST /v1/responses``) for ``clovercode serve``: the request in, and the
responses a tenant asked to keep (``store``) for ``previous_response_id`` and ``GET /v1/responses/ID``.

Pure parsing into the same messages, tools and params a chat request gives; what the server cannot
honour is refused with a 400 naming the field. The answer (objects and stream events) is in
serve/responses_answer.py.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from clovercode.backends.base import GenerationParams
from clovercode.ground.messages import CallRecord, Message
from clovercode.serve.protocol import ApiError, Limits, _cache_key, _params, _tools, bad_param, plain_tool_choice
from clovercode.toolcalls.schemas import ToolSpec

RESPONSES_PATH = "/v1/responses"
KEPT_PER_TENANT = 64  # stored responses per tenant; the oldest go first
# A custom (freeform) tool takes one string; the model calls it as a function of one parameter.
CUSTOM_INPUT = "input"
_INCLUDE_OK = {"reasoning.encrypted_content"}  # nothing is encrypted: reasoning comes back in the clear
_REFUSED = {"background": "background responses", "conversation": "conversations (send previous_response_id or the items)",
            "prompt": "prompt templates", "top_logprobs": "log probabilities", "max_tool_calls": "max_tool_calls"}


@dataclass(frozen=True)
class ResponsesRequest:
    model: str | None
    messages: list[Message]  # instructions first, then the history and this input
    history: list[Message]  # the same without the instructions: what a later response continues
    tools: list[ToolSpec]
    params: GenerationParams
    stream: bool = False
    parse_tools: bool = False
    user: str | None = None
    cache_key: str | None = None
    custom_tools: frozenset[str] = frozenset()  # names of tools whose calls are custom_tool_call items
    parallel_tool_calls: bool = True
    store: bool = True
    echo: dict[str, Any] = field(default_factory=dict)  # request fields the response object repeats


@dataclass
class Kept:
    response: dict[str, Any]
    history: list[Message]  # the conversation through this response's output


class ResponseStore:
    """Responses kept per tenant (never visible to another), at most KEPT_PER_TENANT each."""

    def __init__(self, per_tenant: int = KEPT_PER_TENANT):
        self.per_tenant = per_tenant
        self._kept: dict[str, OrderedDict[str, Kept]] = {}
        self._lock = threading.Lock()

    def put(self, tenant: str, response: dict[str, Any], history: list[Message]) -> None:
        with self._lock:
            kept = self._kept.setdefault(tenant, OrderedDict())
            kept[response["id"]] = Kept(response, history)
            while len(kept) > self.per_tenant:
                kept.popitem(last=False)

    def history(self, tenant: str, response_id: str) -> list[Message]:
        with self._lock:
            found = self._kept.get(tenant, {}).get(response_id)
        if found is None:
            raise ApiError(400, f"Previous response with id '{response_id}' not found (responses are kept "
                           f"only when sent with store: true, the last {self.per_tenant} per API key, until "
                           "the server restarts).", param="previous_response_id", code="previous_response_not_found")
        return list(found.history)

    def get(self, tenant: str, response_id: str) -> dict[str, Any]:
        with self._lock:
            found = self._kept.get(tenant, {}).get(response_id)
        if found is None:
            raise ApiError(404, f"No response with id '{response_id}' is stored for your API key.", code="not_found")
        return found.response


def new_response_id() -> str:
    return "resp_" + secrets.token_hex(12)


def parse_responses_request(body: Any, limits: Limits, store: ResponseStore, tenant: str) -> ResponsesRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    for name, what in _REFUSED.items():
        if body.get(name) not in (None, False):
            raise bad_param(name, f"is not supported: this server does not offer {what}")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_param("model", "must be a string")
    include = body.get("include") or []
    if not isinstance(include, list) or any(item not in _INCLUDE_OK for item in include):
        raise bad_param("include", f"may only hold {sorted(_INCLUDE_OK)}")
    if body.get("truncation") not in (None, "disabled"):
        raise bad_param("truncation", "must be 'disabled': an input that does not fit is refused, never cut")
    tools, custom = _response_tools(body.get("tools"))
    tool_choice = _tool_choice(body.get("tool_choice"), tools)
    json_schema = _text_format(body.get("text"))
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad_param("instructions", "must be a string")
    history: list[Message] = []
    previous = body.get("previous_response_id")
    if previous is not None:
        if not isinstance(previous, str):
            raise bad_param("previous_response_id", "must be a string")
        history = store.history(tenant, previous)
    history += _input(body.get("input"), custom)
    messages = ([Message("system", instructions)] if instructions else []) + history
    for flag in ("stream", "store", "parallel_tool_calls"):
        if not isinstance(body.get(flag, False), bool):
            raise bad_param(flag, "must be true or false")
    chat_like = {"max_tokens": body.get("max_output_tokens"), "temperature": body.get("temperature"),
                 "top_p": body.get("top_p"), "seed": body.get("seed")}
    try:
        params = _params({k: v for k, v in chat_like.items() if v is not None}, _reasoning(body.get("reasoning"), limits))
    except ApiError as exc:
        raise bad_param("max_output_tokens" if exc.param == "max_tokens" else str(exc.param),
                   exc.message.split("' ", 1)[-1]) from None
    params = replace(params, tool_choice=tool_choice, json_schema=json_schema,
                     close_calls=tool_choice not in (None, "auto", "none"))
    if json_schema is not None:  # reasoning would spend the budget the object needs
        params = replace(params, thinking=False)
    user = body.get("safety_identifier") or body.get("user")
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad_param("metadata", "must be an object")
    echo = {"instructions": instructions, "max_output_tokens": body.get("max_output_tokens"),
            "metadata": metadata or {}, "previous_response_id": previous, "temperature": params.temperature,
            "top_p": params.top_p, "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [], "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "store": body.get("store", True), "text": body.get("text") or {"format": {"type": "text"}},
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None}, "truncation": "disabled"}
    return ResponsesRequest(model, messages, history, tools, params, body.get("stream", False),
                            bool(tools) and tool_choice != "none" and json_schema is None,
                            user if isinstance(user, str) and user else None, _cache_key(body), custom,
                            body.get("parallel_tool_calls", True), body.get("store", True), echo)


def _reasoning(raw: Any, limits: Limits) -> Limits:
    """reasoning.effort "none" / "minimal" turns thinking off; any other effort leaves it on."""
    if raw is None:
        return limits
    if not isinstance(raw, dict):
        raise bad_param("reasoning", "must be an object")
    effort = raw.get("effort")
    if effort is not None and effort not in ("none", "minimal", "low", "medium", "high", "xhigh"):
        raise bad_param("reasoning.effort", "must be none, minimal, low, medium, high or xhigh")
    return replace(limits, thinking=limits.thinking and effort not in ("none", "minimal"))


def _response_tools(raw: Any) -> tuple[list[ToolSpec], frozenset[str]]:
    """Responses tools (flat: ``{"type": "function", "name", "parameters"}``) as specs; custom
    (freeform) tools as functions of one string. Hosted tools cannot run here: refused by name."""
    if raw is None:
        return [], frozenset()
    if not isinstance(raw, list):
        raise bad_param("tools", "must be a list")
    functions, custom = [], set()
    for index, tool in enumerate(raw):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            functions.append({"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}})
        elif kind == "custom" and isinstance(tool.get("name"), str):
            custom.add(tool["name"])
            functions.append({"type": "function", "function": {
                "name": tool["name"], "description": tool.get("description") or "",
                "parameters": {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}},
                               "required": [CUSTOM_INPUT], "additionalProperties": False}}})
        else:
            raise bad_param(f"tools[{index}]", f"is a '{kind}' tool; this server runs function and custom tools only "
                       "(for Codex CLI: web_search = \"disabled\" and no tool namespaces, e.g. --disable multi_agent)")
    try:
        return _tools(functions), frozenset(custom)
    except ApiError as exc:
        raise ApiError(400, exc.message.replace(".function", ""), param="tools") from None


def _tool_choice(raw: Any, tools: list[ToolSpec]) -> str | None:
    """As chat's: not given is "auto" over the offered tools (grammar-enforced), None without tools."""
    if raw is None:
        return "auto" if tools else None
    if isinstance(raw, dict):
        name = raw.get("name") if raw.get("type") in ("function", "custom") else None
        if not isinstance(name, str) or name not in {t.name for t in tools}:
            raise bad_param("tool_choice", "must be auto, none, required or {\"type\": \"function\", \"name\": NAME} "
                       "naming one of the tools")
        return name
    return plain_tool_choice(raw, tools)


def _text_format(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    fmt = raw.get("format") if isinstance(raw, dict) else None
    if isinstance(raw, dict) and raw.get("verbosity") not in (None, "medium"):
        raise bad_param("text.verbosity", "is not supported (only medium, the default)")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema" and isinstance(fmt.get("schema"), dict):
        return fmt["schema"]
    raise bad_param("text.format", "must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
               "{\"type\": \"json_schema\", \"name\": ..., \"schema\": {...}}")


def _input(raw: Any, custom: frozenset[str]) -> list[Message]:
    """``input`` (a string, or a list of items) as messages: calls join the assistant turn before them."""
    if isinstance(raw, str):
        return [Message("user", raw)]
    if not isinstance(raw, list) or not raw:
        raise bad_param("input", "must be a string or a non-empty list of items")
    out: list[Message] = []
    reasoning = ""
    for index, item in enumerate(raw):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise bad_param(where, "must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = {"developer": "system", "system": "system", "user": "user", "assistant": "assistant"}.get(item.get("role"))
            if role is None:
                raise bad_param(f"{where}.role", "must be user, assistant, system or developer")
            out.append(Message(role, _text(item.get("content"), f"{where}.content"), reasoning if role == "assistant" else ""))
            reasoning = "" if role == "assistant" else reasoning
        elif kind in ("function_call", "custom_tool_call"):
            name, call_id = item.get("name"), item.get("call_id")
            if not isinstance(name, str) or not isinstance(call_id, str):
                raise bad_param(where, "needs a string 'name' and 'call_id'")
            arguments = ({CUSTOM_INPUT: item.get("input") if isinstance(item.get("input"), str) else ""}
                         if kind == "custom_tool_call" else _arguments(item.get("arguments"), where))
            call = CallRecord(call_id, name, arguments)
            if out and out[-1].role == "assistant":
                out[-1] = replace(out[-1], tool_calls=(*out[-1].tool_calls, call))
            else:
                out.append(Message("assistant", "", reasoning, (call,)))
            reasoning = ""
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise bad_param(where, "needs a string 'call_id'")
            output = item.get("output")
            out.append(Message("tool", output if isinstance(output, str) else _text(output, f"{where}.output"),
                               tool_call_id=call_id))
        elif kind == "reasoning":
            parts = (item.get("content") or []) + (item.get("summary") or [])
            reasoning += "".join(p.get("text", "") for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
        else:
            raise bad_param(f"{where}.type", f"'{kind}' items are not supported; send message, function_call, "
                       "function_call_output, custom_tool_call(_output) or reasoning items")
    if not out:
        raise bad_param("input", "holds no message")
    return out


def _text(raw: Any, where: str) -> str:
    if raw is None or isinstance(raw, str):
        return raw or ""
    if isinstance(raw, list):
        parts = []
        for part in raw:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in ("input_text", "output_text", "text", "refusal") or not isinstance(part.get("text", part.get("refusal")), str):
                raise bad_param(where, f"may only hold text parts (input_text, output_text); '{kind}' is not supported")
            parts.append(part.get("text", part.get("refusal")))
        return "".join(parts)
    raise bad_param(where, "must be a string or a list of text parts")


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except (ValueError, RecursionError):
        raise bad_param(f"{where}.arguments", "is not valid JSON (or nested too deeply)") from None
    if not isinstance(value, dict):
        raise bad_param(f"{where}.arguments", "must encode a JSON object")
    return value

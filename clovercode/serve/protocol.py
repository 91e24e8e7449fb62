"""The OpenAI chat-completions wire format for ``clovercode serve``: requests in, responses out.

Pure functions: a request body becomes a :class:`ChatRequest` (or an :class:`ApiError` naming the
offending field), and results become the JSON objects OpenAI clients expect.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, replace
from typing import Any

from clovercode.ground.messages import CallRecord, Message
from clovercode.backends.base import GenerationParams, Usage
from clovercode.toolcalls.coerce import coerce_arguments
from clovercode.toolcalls.parser import ParsedCall
from clovercode.toolcalls.schemas import ToolSpec

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
MAX_STOPS = 16
MAX_CACHE_KEY = 256  # characters of a prompt_cache_key / cache_salt
SEED_RANGE = (-(2 ** 63), 2 ** 64 - 1)  # what torch's generators take


class ApiError(Exception):
    """An error answered to the client as ``{"error": {...}}`` with an HTTP status."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type, code, param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.code, self.param)


def error_body(message: str, type: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass(frozen=True)
class Limits:
    """What the server allows a request to ask for."""

    max_new_tokens: int = 4096
    thinking: bool = True


@dataclass(frozen=True)
class ChatRequest:
    model: str | None
    messages: list[Message]
    tools: list[ToolSpec]
    params: GenerationParams
    stream: bool = False
    include_usage: bool = False
    parse_tools: bool = False  # tools were given and tool_choice is not "none"
    user: str | None = None
    cache_key: str | None = None  # OpenAI's prompt_cache_key and/or vLLM's cache_salt: narrows prompt reuse
    parallel_tool_calls: bool = True  # false: at most one call a reply (the first the model wrote)
    limit_field: str = "max_tokens"  # the token-limit field the client sent (errors name it)


def parse_chat_request(body: Any, limits: Limits) -> ChatRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_param("model", "must be a string")
    messages = _messages(body.get("messages"))
    tools = _tools(body.get("tools"))
    tool_choice = _tool_choice(body.get("tool_choice"), tools)
    if body.get("n") not in (None, 1):
        raise bad_param("n", "only n = 1 is supported")
    json_schema = _response_schema(body.get("response_format"))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_param("stream", "must be true or false")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad_param("stream_options", "must be an object")
    user = body.get("user")
    refuse_unhonoured(body)
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise bad_param("parallel_tool_calls", "must be true or false")
    params = replace(_params(body, limits), tool_choice=tool_choice, json_schema=json_schema,
                     close_calls=tool_choice not in (None, "auto", "none"))
    if json_schema is not None:  # reasoning would spend the budget the object needs (content holds it)
        params = replace(params, thinking=False)
    return ChatRequest(model, messages, tools, params, stream, bool(options.get("include_usage")),
                       bool(tools) and tool_choice != "none" and json_schema is None,
                       user if isinstance(user, str) and user else None, _cache_key(body), parallel,
                       "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens")


def refuse_unhonoured(body: dict[str, Any]) -> None:
    """Sampling fields the engine does not apply: refused unless they ask for nothing (0, false,
    empty), so a client never believes they took effect."""
    for name in ("presence_penalty", "frequency_penalty"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value != 0):
            raise bad_param(name, "is not supported by this server (only 0)")
    if body.get("logit_bias") not in (None, {}):
        raise bad_param("logit_bias", "is not supported by this server")
    if body.get("logprobs") not in (None, False):
        raise bad_param("logprobs", "is not supported by this server: log probabilities are not returned")
    if body.get("top_logprobs") not in (None, 0):
        raise bad_param("top_logprobs", "is not supported by this server: log probabilities are not returned")


def _cache_key(body: dict[str, Any]) -> str | None:
    """The client's own prompt-cache namespace: OpenAI's ``prompt_cache_key``, vLLM's ``cache_salt``
    (both given: both count). Reuse never crosses API keys whatever it says (clovercode/trust/serve.py)."""
    parts = []
    for name in ("prompt_cache_key", "cache_salt"):
        value = body.get(name)
        if value is None:
            parts.append("")
            continue
        if not isinstance(value, str) or len(value) > MAX_CACHE_KEY:
            raise bad_param(name, f"must be a string of at most {MAX_CACHE_KEY} characters")
        parts.append(value)
    return None if not any(parts) else f"{len(parts[0])}:{parts[0]}/{parts[1]}"


def _tool_choice(raw: Any, tools: list[ToolSpec]) -> str | None:
    """OpenAI's tool_choice → "auto" | "required" | "none" | a tool's name. Not given: "auto" when
    tools are offered (OpenAI's default: text or a call to one of THEM, which the grammar enforces,
    so a model trained on other tools cannot call those), else None (free text)."""
    if raw is None:
        return "auto" if tools else None
    if isinstance(raw, dict):
        function = raw.get("function") if raw.get("type", "function") == "function" else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise bad_param("tool_choice", 'must be "auto", "required", "none" or {"type": "function", "function": {"name": ...}}')
        if name not in {t.name for t in tools}:
            raise bad_param("tool_choice", f"names the function '{name}', which is not among the tools")
        return name
    return plain_tool_choice(raw, tools)


def plain_tool_choice(raw: Any, tools: list[ToolSpec]) -> str:
    """A tool_choice given as a word (auto, required, none): the same rule for chat and Responses."""
    if raw not in ("auto", "required", "none"):
        raise bad_param("tool_choice", f"'{raw}' is not one of auto, required, none or a named function")
    if raw == "required" and not tools:
        raise bad_param("tool_choice", "'required' needs at least one tool in 'tools'")
    return str(raw)


def _response_schema(raw: Any) -> dict[str, Any] | None:
    """response_format → the JSON Schema the reply must satisfy (json_object: any JSON object)."""
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = raw.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise bad_param("response_format", "json_schema needs {\"json_schema\": {\"name\": ..., \"schema\": {...}}}")
        return schema
    raise bad_param("response_format", f"'{kind}' is not supported; use text, json_object or json_schema")


def bad_param(param: str, problem: str) -> ApiError:
    """A 400 naming the request field at fault, in OpenAI's error shape."""
    return ApiError(400, f"'{param}' {problem}", param=param)


def _params(body: dict[str, Any], limits: Limits) -> GenerationParams:
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = limits.max_new_tokens
    elif isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise bad_param("max_tokens", "must be a whole number of at least 1")
    temperature = _number(body, "temperature", 0.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOPS:
        stops = tuple(s for s in stop if s)
    else:
        raise bad_param("stop", f"must be a string or a list of at most {MAX_STOPS} strings")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                             or not SEED_RANGE[0] <= seed <= SEED_RANGE[1]):
        raise bad_param("seed", f"must be a whole number from {SEED_RANGE[0]} to {SEED_RANGE[1]}")
    thinking = limits.thinking
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and isinstance(kwargs.get("enable_thinking"), bool):
        thinking = kwargs["enable_thinking"]
    # Asking for more than the server allows is clamped, not refused: the reply ends with
    # finish_reason "length", which is the truth.
    return GenerationParams(min(max_tokens, limits.max_new_tokens), temperature, top_p, stops, thinking, seed)


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise bad_param(key, f"must be a number from {low:g} to {high:g}")
    return float(value)


def _messages(raw: Any) -> list[Message]:
    if not isinstance(raw, list) or not raw:
        raise bad_param("messages", "must be a non-empty list")
    out = []
    for index, item in enumerate(raw):
        where = f"messages[{index}]"
        if not isinstance(item, dict):
            raise bad_param(where, "must be an object")
        role = ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None
        if role is None:
            raise bad_param(f"{where}.role", f"must be one of {', '.join(ROLES)}")
        content = _content(item.get("content"), f"{where}.content")
        reasoning = item.get("reasoning_content") or item.get("reasoning") or ""
        calls = _assistant_calls(item.get("tool_calls"), where) if role == "assistant" else ()
        call_id = item.get("tool_call_id") if role == "tool" else None
        name = item.get("name") if role == "tool" and isinstance(item.get("name"), str) else None
        out.append(Message(role, content, reasoning if isinstance(reasoning, str) else "", calls,
                           call_id if isinstance(call_id, str) else None, name))
    return out


def _content(raw: Any, where: str) -> str:
    if raw is None or isinstance(raw, str):
        return raw or ""
    if isinstance(raw, list):
        parts = []
        for part in raw:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_param(where, "may only hold text parts ({\"type\": \"text\", \"text\": ...})")
            parts.append(part["text"])
        return "".join(parts)
    raise bad_param(where, "must be a string or a list of text parts")


def _assistant_calls(raw: Any, where: str) -> tuple[CallRecord, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise bad_param(f"{where}.tool_calls", "must be a list")
    calls = []
    for index, call in enumerate(raw):
        at = f"{where}.tool_calls[{index}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_param(at, "must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}")
        arguments = function.get("arguments") or {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (json.JSONDecodeError, RecursionError):
                raise bad_param(f"{at}.function.arguments", "is not valid JSON (or nested too deeply)") from None
        if not isinstance(arguments, dict):
            raise bad_param(f"{at}.function.arguments", "must encode a JSON object")
        calls.append(CallRecord(str(call.get("id") or f"call_{index}"), function["name"], arguments))
    return tuple(calls)


def _tools(raw: Any) -> list[ToolSpec]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_param("tools", "must be a list")
    specs = []
    for index, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise bad_param(f"tools[{index}]", "must be {\"type\": \"function\", \"function\": {\"name\", \"parameters\"}}")
        parameters = function.get("parameters")
        parameters = {"type": "object", "properties": {}} if parameters is None else parameters
        if not isinstance(parameters, dict):
            raise bad_param(f"tools[{index}].function.parameters", "must be a JSON Schema object")
        description = function.get("description") if isinstance(function.get("description"), str) else ""
        specs.append(ToolSpec(function["name"], description, parameters))
    return specs


# ---- responses --------------------------------------------------------------------------------

def new_completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


def tool_call_objects(calls: list[ParsedCall], tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Calls as OpenAI ``tool_calls``; XML values (strings) get the types their tool's schema asks for."""
    schemas = {t.name: t.schema for t in tools}
    out = []
    for call in calls:
        arguments = coerce_arguments(call.arguments, schemas[call.name]) if call.name in schemas else call.arguments
        out.append({"id": "call_" + secrets.token_hex(8), "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(arguments, ensure_ascii=False)}})
    return out


def usage_object(usage: Usage) -> dict[str, Any]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},  # OpenAI's field for prompt caching
            "completion_tokens_details": {"reasoning_tokens": int(usage.extra.get("reasoning_tokens", 0))}}


def completion_object(cid: str, model: str, created: int, content: str, reasoning: str,
                      tool_calls: list[dict[str, Any]], finish_reason: str, usage: Usage) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if tool_calls else "")}
    if reasoning:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": cid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": usage_object(usage)}


def chunk_object(cid: str, model: str, created: int, delta: dict[str, Any], finish_reason: str | None = None,
                 *, with_usage_field: bool = False) -> dict[str, Any]:
    chunk: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                             "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}
    if with_usage_field:
        chunk["usage"] = None
    return chunk


def usage_chunk_object(cid: str, model: str, created: int, usage: Usage) -> dict[str, Any]:
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
            "usage": usage_object(usage)}


def finish_reason(backend_reason: str, has_calls: bool) -> str:
    if has_calls:
        return "tool_calls"
    return "length" if backend_reason == "length" else "stop"


def model_list(model: str, created: int, context_window: int | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": model, "object": "model", "created": created, "owned_by": "clovercode"}
    if context_window:
        entry["max_model_len"] = context_window  # the field vLLM and SGLang use; the endpoint backend reads it
    return {"object": "list", "data": [entry]}

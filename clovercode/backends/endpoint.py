"""Endpoint backend: the model protocol over an OpenAI-compatible chat-completions server (SGLang,
vLLM, llama.cpp's server, ``clovercode serve``).

Tools go out as OpenAI tool definitions built from ``tools/*.json``. When the server parses tool
calls (started with a tool-call parser) they come back in ``tool_calls`` and are yielded as
ToolCallEvent; when it does not, the calls are in the text and the loop's parser finds them. The
same holds for reasoning: ``reasoning_content`` becomes ``TextDelta(reasoning=True)``, else the
``<think>`` tags stay in the text.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

from clovercode.agent.messages import Message
from clovercode.backends.base import Event, Finish, GenerationParams, ModelError, TextDelta, ToolCallEvent, Usage
from clovercode.backends.endpoint_http import (HttpFailure, Target, Transport, domain_error, error_message,
                                               parse_base_url, with_retries)
from clovercode.backends.sse import iter_sse_data
from clovercode.context.tokens import estimate_tokens
from clovercode.errors import ModelUnavailable
from clovercode.toolcalls.parser import TOOL_CLOSE
from clovercode.toolcalls.schemas import ToolSpec

# vLLM without --enable-auto-tool-choice refuses tool_choice "auto"; "none" still renders the tools
# into the prompt, and the harness parses the calls from the text.
_NO_AUTO_TOOLS_HINTS = ("auto-tool-choice", "tool-call-parser", "tool_call_parser", "auto tool choice")


@dataclass(frozen=True)
class EndpointOptions:
    url: str
    model: str = ""  # "" = the one model the server lists
    api_key: str = ""
    connect_timeout: float = 10.0
    read_timeout: float = 600.0
    retries: int = 4
    backoff: float = 0.5  # first retry delay in seconds; doubles each time
    max_backoff: float = 30.0


def options_from_config(cfg: Any) -> EndpointOptions:
    """``endpoint_model`` names the server's model; an explicitly chosen ``--model`` does too."""
    model = cfg["endpoint_model"] or (cfg["model"] if cfg.sources.get("model", "default") != "default" else "")
    return EndpointOptions(cfg["endpoint"], model, cfg["api_key"], cfg["endpoint_connect_timeout"],
                           cfg["endpoint_read_timeout"], cfg["endpoint_retries"])


class EndpointBackend:
    def __init__(self, options: EndpointOptions, *, context_window: int | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.options = options
        self.target: Target = parse_base_url(options.url)
        self.transport = Transport(self.target, options.api_key, options.connect_timeout, options.read_timeout)
        self.model = options.model
        self.name = f"endpoint:{self.target.url}#{self.model or '?'}"
        if context_window:
            self.context_window = context_window
        self._sleep = sleep
        self._tool_choice = "auto"

    @classmethod
    def connect(cls, options: EndpointOptions, *, sleep: Callable[[float], None] = time.sleep) -> "EndpointBackend":
        """Check that the server answers and serves the model (ModelUnavailable with a fix if not)."""
        backend = cls(options, sleep=sleep)
        models = backend.list_models()
        if models is None:
            if not options.model:
                raise ModelUnavailable(f"the endpoint {backend.target.url} does not list its models, so clovercode "
                                       "cannot tell which one to ask for",
                                       hint="Name it with endpoint_model (CLOVERCODE_ENDPOINT_MODEL) or --model.")
            return backend
        chosen = choose_model(options.model, [m["id"] for m in models], backend.target.url)
        entry = next(m for m in models if m["id"] == chosen)
        window = entry.get("max_model_len") or entry.get("context_length") or entry.get("context_window")
        return cls(replace(options, model=chosen),
                   context_window=window if isinstance(window, int) and window > 0 else None, sleep=sleep)

    def list_models(self) -> list[dict[str, Any]] | None:
        """``GET /models``; None when the server has no such route."""
        def attempt() -> list[dict[str, Any]] | None:
            try:
                response = self.transport.open("GET", "/models")
            except HttpFailure as exc:
                if exc.status in (404, 405):
                    return None
                raise
            try:
                body = json.loads(response.read())
            except (json.JSONDecodeError, OSError, http.client.HTTPException) as exc:
                raise HttpFailure(f"GET /models returned something that is not JSON ({exc})") from None
            finally:
                response.close()
            data = body.get("data") if isinstance(body, dict) else None
            if not isinstance(data, list):
                raise HttpFailure("GET /models did not return a model list; is this an OpenAI-compatible server?")
            return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

        try:
            return self._retry(attempt)
        except HttpFailure as exc:
            raise domain_error(exc, self.target, self.model, ModelUnavailable) from None

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        started = time.monotonic()
        response = self._open_stream(messages, tools, params)
        try:
            if "json" in (response.getheader("Content-Type") or ""):  # a server that ignored stream: true
                yield from self._decode_whole(response, messages, started)
            else:
                yield from self._decode(response, messages, started)
        except socket.timeout:
            raise ModelError(f"the endpoint {self.target.url} sent nothing for {self.options.read_timeout:g} s mid-reply",
                             hint="Raise endpoint_read_timeout if the server is just slow.") from None
        except (OSError, http.client.HTTPException) as exc:
            raise ModelError(f"the connection to {self.target.url} broke mid-reply: {exc or type(exc).__name__}") from None
        finally:
            response.close()

    def close(self) -> None:
        pass

    def request_body(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model or "default",
            "messages": [_wire_message(m) for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        # A stop at </tool_call> would cut the closing tag the server's tool parser waits for; the
        # model's own end-of-turn token ends a tool-calling turn instead.
        stops = [s for s in params.stop if s != TOOL_CLOSE]
        if stops:
            body["stop"] = stops
        if params.seed is not None:
            body["seed"] = params.seed
        if not params.thinking:
            body["chat_template_kwargs"] = {"enable_thinking": False}
        if tools:
            body["tools"] = [spec.openai_tool() for spec in tools]
            body["tool_choice"] = self._tool_choice
        return body

    def _open_stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> http.client.HTTPResponse:
        def attempt() -> http.client.HTTPResponse:
            try:
                return self.transport.open("POST", "/chat/completions", self.request_body(messages, tools, params))
            except HttpFailure as exc:
                lowered = exc.message.lower()
                if tools and exc.status == 400 and self._tool_choice == "auto" and any(h in lowered for h in _NO_AUTO_TOOLS_HINTS):
                    self._tool_choice = "none"
                    return self.transport.open("POST", "/chat/completions", self.request_body(messages, tools, params))
                raise

        try:
            return self._retry(attempt)
        except HttpFailure as exc:
            raise domain_error(exc, self.target, self.model) from None

    def _decode(self, response: http.client.HTTPResponse, messages: Sequence[Message], started: float) -> Iterator[Event]:
        calls: dict[int, dict[str, Any]] = {}
        usage: dict[str, Any] | None = None
        finish = None
        written: list[str] = []  # the reply, for the token estimate when the server sends no usage
        for data in iter_sse_data(response.readline):
            if data.strip() == "[DONE]":
                break
            try:
                chunk = json.loads(data)
            except json.JSONDecodeError:
                raise ModelError(f"the endpoint {self.target.url} streamed something that is not JSON: {data[:120]!r}") from None
            if not isinstance(chunk, dict):
                continue
            if chunk.get("error"):
                message, code = error_message(json.dumps(chunk))
                status = chunk["error"].get("code") if isinstance(chunk["error"], dict) else None
                raise domain_error(HttpFailure(message, status=status if isinstance(status, int) else 500, code=code),
                                   self.target, self.model)
            if isinstance(chunk.get("usage"), dict):
                usage = chunk["usage"]
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                if isinstance(reasoning, str) and reasoning:
                    written.append(reasoning)
                    yield TextDelta(reasoning, reasoning=True)
                content = delta.get("content")
                if isinstance(content, str) and content:
                    written.append(content)
                    yield TextDelta(content)
                for call in delta.get("tool_calls") or ():
                    _merge_call(calls, call)
                finish = choice.get("finish_reason") or finish
        for index in sorted(calls):
            call = calls[index]
            if call["name"]:
                yield ToolCallEvent(call["name"], _decode_arguments(call["arguments"]), call["id"])
        yield _usage(usage, messages, "".join(written), time.monotonic() - started)
        yield Finish("tool_calls" if calls else finish if finish in ("stop", "length", "tool_calls") else "stop")

    def _decode_whole(self, response: http.client.HTTPResponse, messages: Sequence[Message], started: float) -> Iterator[Event]:
        try:
            body = json.loads(response.read())
            choice = body["choices"][0]
            message = choice["message"]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError):
            raise ModelError(f"the endpoint {self.target.url} answered with JSON that is not a chat completion") from None
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            yield TextDelta(reasoning, reasoning=True)
        content = message.get("content")
        if isinstance(content, str) and content:
            yield TextDelta(content)
        calls: dict[int, dict[str, Any]] = {}
        for index, call in enumerate(message.get("tool_calls") or ()):
            _merge_call(calls, {**call, "index": index})
        for index in sorted(calls):
            if calls[index]["name"]:
                yield ToolCallEvent(calls[index]["name"], _decode_arguments(calls[index]["arguments"]), calls[index]["id"])
        written = (reasoning if isinstance(reasoning, str) else "") + (content if isinstance(content, str) else "")
        yield _usage(body.get("usage"), messages, written, time.monotonic() - started)
        finish = choice.get("finish_reason")
        yield Finish("tool_calls" if calls else finish if finish in ("stop", "length") else "stop")

    def _retry(self, attempt: Callable[[], Any]) -> Any:
        return with_retries(attempt, self.options.retries, backoff=self.options.backoff,
                            max_backoff=self.options.max_backoff, sleep=self._sleep)


def choose_model(requested: str, served: list[str], url: str) -> str:
    if requested:
        if requested in served:
            return requested
        raise ModelUnavailable(f"the endpoint {url} does not serve a model named '{requested}'",
                               hint=f"It serves: {', '.join(served) or 'nothing'}. Set endpoint_model "
                               "(CLOVERCODE_ENDPOINT_MODEL) to one of them.")
    if len(served) == 1:
        return served[0]
    if not served:
        raise ModelUnavailable(f"the endpoint {url} serves no models yet", hint="Wait until the server has loaded its model.")
    raise ModelUnavailable(f"the endpoint {url} serves several models: {', '.join(served)}",
                           hint="Choose one with endpoint_model (CLOVERCODE_ENDPOINT_MODEL) or --model.")


def _wire_message(message: Message) -> dict[str, Any]:
    out = message.to_openai()
    if message.role == "assistant" and message.reasoning:
        out["reasoning_content"] = message.reasoning  # templates that keep reasoning between tool calls use it
    return out


def _merge_call(calls: dict[int, dict[str, Any]], delta: dict[str, Any]) -> None:
    """Tool calls stream in fragments keyed by ``index``: the id and name once, arguments in pieces."""
    index = delta.get("index", len(calls))
    slot = calls.setdefault(index if isinstance(index, int) else len(calls), {"id": None, "name": "", "arguments": ""})
    if delta.get("id"):
        slot["id"] = delta["id"]
    function = delta.get("function") or {}
    name = function.get("name")
    if isinstance(name, str) and name and name != slot["name"]:
        slot["name"] += name
    arguments = function.get("arguments")
    if isinstance(arguments, dict):
        slot["arguments"] = arguments
    elif isinstance(arguments, str) and isinstance(slot["arguments"], str):
        slot["arguments"] += arguments


def _decode_arguments(arguments: Any) -> dict[str, Any] | str:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments  # the validator tells the model its arguments were not valid JSON
    return value if isinstance(value, dict) else arguments


def _usage(usage: dict[str, Any] | None, messages: Sequence[Message], written: str, seconds: float) -> Usage:
    if usage:
        return Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), seconds=seconds)
    # A server that ignores stream_options sends no usage: estimate so token budgets still bite, and
    # say it is an estimate.
    prompt = sum(estimate_tokens(m.content) + estimate_tokens(m.reasoning) for m in messages)
    return Usage(prompt, max(1, estimate_tokens(written)), seconds=seconds, extra={"usage_estimated": True})

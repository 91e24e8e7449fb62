"""Endpoint backend: the model protocol over an OpenAI-compatible chat-completions server (SGLang,
vLLM, llama.cpp's server, ``clovercode serve``).

Tools go out as OpenAI tool definitions built from ``tools/*.json`` (or, for a server whose chat
template drops them, described in the system prompt: ``endpoint_tools``, see endpoint_tools.py).
When the server parses tool calls they come back in ``tool_calls`` and are yielded as
ToolCallEvent; when it does not, the calls are in the text and the loop's parser finds them. The
same holds for reasoning: ``reasoning_content`` becomes ``TextDelta(reasoning=True)``, else the
``<think>`` tags stay in the text.

A reply counts only when the server finished it (endpoint_wire.py): a stream that just ends is
asked again without streaming, for the server's real answer or its real error.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

from clovercode.ground.messages import Message
from clovercode.backends.base import ContextTooLong, Event, GenerationParams, ModelError, Notice, Usage
from clovercode.backends.endpoint_discovery import choose_model, read_json, window_from_listing, window_from_routes
from clovercode.backends.endpoint_http import HttpFailure, Target, Transport, domain_error, parse_base_url, with_retries
from clovercode.backends.endpoint_tools import probe_body, prompt_mode_messages, tools_dropped, wire_tool
from clovercode.backends.endpoint_wire import (NotJson, Reply, StreamCut, StreamError, closing_events, decode_stream,
                                               decode_whole, estimate_prompt)
from clovercode.context.tokens import DEFAULT_WINDOW
from clovercode.ground.errors import CloverError, ModelUnavailable
from clovercode.toolcalls.parser import TOOL_CLOSE
from clovercode.toolcalls.schemas import ToolSpec

# vLLM without --enable-auto-tool-choice refuses tool_choice "auto"; "none" still renders the tools
# into the prompt, and the harness parses the calls from the text.
_NO_AUTO_TOOLS_HINTS = ("auto-tool-choice", "tool-call-parser", "tool_call_parser", "auto tool choice")
# llama-cpp-python's chatml-function-calling (and functionary) handlers cannot stream tool_choice "auto".
_NO_STREAMED_TOOLS_HINT = "streaming tool choice"
_WINDOW_IN_ERROR = re.compile(r"maximum context length is (\d+)|context window of (\d+)|max_model_len[ =(]*(\d+)", re.I)
# Servers that refuse `tools` outright: Ollama for a model whose template has none, llama.cpp's
# llama-server started without --jinja.
_NO_TOOLS_HINTS = ("does not support tools", "requires --jinja")
LOG_HINT = "Look at the server's log for why (a crash, a kill, out of memory, a request it could not handle)."


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
    stream: str = "auto"  # auto | true | false
    tools: str = "auto"  # native | prompt | auto
    window_setting: int = 0  # the context.window setting: a window the person gave needs no discovery note


def options_from_config(cfg: Any) -> EndpointOptions:
    """``endpoint_model`` names the server's model; an explicitly chosen ``--model`` does too."""
    model = cfg["endpoint_model"] or (cfg["model"] if cfg.sources.get("model", "default") != "default" else "")
    return EndpointOptions(cfg["endpoint"], model, cfg["api_key"], cfg["endpoint_connect_timeout"],
                           cfg["endpoint_read_timeout"], cfg["endpoint_retries"], stream=cfg["endpoint_stream"],
                           tools=cfg["endpoint_tools"], window_setting=cfg["context.window"])


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
        self._pass_choice = True  # send the run's own tool_choice (until the server refuses one)
        self._stream_tools = options.stream != "false"  # auto turns it off for a server that refuses
        self._prompt_tools: bool | None = {"native": False, "prompt": True}.get(options.tools)  # None: not probed yet
        self._notices: list[Notice] = []
        self.window_assumed = False

    @classmethod
    def connect(cls, options: EndpointOptions, *, sleep: Callable[[float], None] = time.sleep) -> "EndpointBackend":
        """Check that the server answers and serves the model (ModelUnavailable with a fix if not),
        and find its context window."""
        backend = cls(options, sleep=sleep)
        models = backend.list_models()
        window = None
        if models is None:
            if not options.model:
                raise ModelUnavailable(f"the endpoint {backend.target.url} does not list its models, so clovercode "
                                       "cannot tell which one to ask for",
                                       hint="Name it with endpoint_model (CLOVERCODE_ENDPOINT_MODEL) or --model.")
        else:
            chosen = choose_model(options.model, [m["id"] for m in models], backend.target.url)
            entry = next(m for m in models if m["id"] == chosen)
            window = window_from_listing(entry)
            backend = cls(replace(options, model=chosen), sleep=sleep)
            if entry.get("owned_by") == "clovercode" and options.tools == "auto":
                backend._prompt_tools = False  # `clovercode serve` always shows the model its tools; no probe
        found = window_from_routes(backend._get_beside_root) if window is None else None
        window = window or (found[0] if found else None)
        if window:
            backend.context_window = window
        elif not options.window_setting:
            backend.window_assumed = True
            backend._notices.append(Notice(
                f"the endpoint {backend.target.url} does not say how large its context window is: clovercode assumes "
                f"{DEFAULT_WINDOW} tokens. If the server's is smaller, long prompts are rejected; set context.window "
                "(CLOVERCODE_CONTEXT_WINDOW) to the server's (llama.cpp: its --ctx-size / --n_ctx).", loud=True))
        return backend

    def list_models(self) -> list[dict[str, Any]] | None:
        """``GET /models``; None when the server has no such route."""
        def attempt() -> list[dict[str, Any]] | None:
            try:
                response = self.transport.open("GET", "/models")
            except HttpFailure as exc:
                if exc.status in (404, 405):
                    return None
                raise
            body = read_json(response, "GET /models")
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
        in_prompt = bool(tools) and self._tools_in_prompt(tools)
        if in_prompt:
            wire, wire_tools = prompt_mode_messages(messages, tools, params.thinking), []
        else:
            wire, wire_tools = [_wire_message(m) for m in messages], list(tools)
        yield from self._take_notices()
        estimate = estimate_prompt(wire, [s.openai_tool() for s in wire_tools])
        yield Usage(estimate, extra={"usage_estimated": True})  # known now; what the server counts comes at the end

        def body(stream: bool) -> dict[str, Any]:
            return self.request_body(wire, wire_tools, params, stream=stream)

        try:
            if self.options.stream == "false" or (wire_tools and not self._stream_tools):
                yield from self._read_whole(self._open(body, stream=False), estimate, started)
            else:
                yield from self._streamed(body, bool(wire_tools), estimate, started)
        except socket.timeout:
            raise ModelError(f"the endpoint {self.target.url} sent nothing for {self.options.read_timeout:g} s mid-reply",
                             hint="Raise endpoint_read_timeout if the server is just slow.") from None
        except (OSError, http.client.HTTPException) as exc:
            raise ModelError(f"the connection to {self.target.url} broke mid-reply: {exc or type(exc).__name__}",
                             hint=LOG_HINT) from None

    def close(self) -> None:
        pass

    def request_body(self, wire: list[dict[str, Any]], tools: Sequence[ToolSpec], params: GenerationParams, *,
                     stream: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model or "default", "messages": wire, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        body.update(max_tokens=params.max_new_tokens, temperature=params.temperature, top_p=params.top_p)
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
            body["tools"] = [wire_tool(spec) for spec in tools]
            body["tool_choice"] = self._wire_choice(params.tool_choice)
        return body

    def _wire_choice(self, asked: str | None) -> Any:
        """The tool_choice to send: the run's own (fix / exec / eval ask for "required"), in OpenAI's
        shapes, unless the server took none of it ("none": it renders the tools, clovercode parses the
        text) or refused one before."""
        if asked is None or self._tool_choice == "none" or not self._pass_choice:
            return self._tool_choice
        if asked in ("auto", "required", "none"):
            return asked
        return {"type": "function", "function": {"name": asked}}

    def _refuses_choice(self, failure: HttpFailure, sent: dict[str, Any]) -> bool:
        """Whether ``failure`` refuses the run's own tool_choice; then only "auto" is sent from now on."""
        if failure.status != 400 or sent.get("tool_choice") in (None, "auto", "none") or \
                "tool_choice" not in failure.message.lower().replace(" ", "_"):
            return False
        self._pass_choice = False
        self._notices.append(Notice(f"the endpoint {self.target.url} refused tool_choice "
                                    f"{json.dumps(sent['tool_choice'])} ({failure.message}): it gets \"auto\" from now "
                                    "on, and the harness checks each turn for a call itself."))
        return True

    def _streamed(self, body: Callable[[bool], dict[str, Any]], with_tools: bool, estimate: int,
                  started: float) -> Iterator[Event]:
        response = self._open(body, stream=True, with_tools=with_tools)
        yield from self._take_notices()  # _open may have stopped streaming for a server that refused it
        if "json" in (response.getheader("Content-Type") or ""):  # a server that ignored stream: true
            yield from self._read_whole(response, estimate, started)
            return
        reply = Reply()
        try:
            yield from decode_stream(response.readline, reply)
        except StreamCut as cut:
            response.close()
            yield from self._after_cut(cut.partial, "", body, with_tools, estimate, started)
            return
        except socket.timeout:
            raise
        except (OSError, http.client.HTTPException) as exc:  # the connection itself broke (a killed server)
            response.close()
            yield from self._after_cut(bool(reply.written or reply.calls), f": {exc or type(exc).__name__}", body,
                                       with_tools, estimate, started)
            return
        except StreamError as exc:
            if with_tools and not reply.written and self._refuses_streamed_tools(exc.failure):
                yield from self._take_notices()
                yield from self._read_whole(self._open(body, stream=False), estimate, started)
                return
            raise self._error(exc.failure) from None
        except NotJson as exc:
            raise ModelError(f"the endpoint {self.target.url} {exc}") from None
        finally:
            response.close()
        yield from closing_events(reply, estimate, time.monotonic() - started)

    def _after_cut(self, partial: bool, detail: str, body: Callable[[bool], dict[str, Any]], with_tools: bool,
                   estimate: int, started: float) -> Iterator[Event]:
        """A stream that ended before the reply did. Never a turn: a part-reply is an error, and an
        empty one is asked again without streaming, for the server's real answer or error."""
        url = self.target.url
        if partial:
            raise ModelError(f"the endpoint {url} stopped mid-reply: the stream ended without a finish_reason or "
                             f"[DONE]{detail}{self._liveness()}. The partial reply was dropped.", hint=LOG_HINT)
        try:  # once, no retries: this asks why, it does not wait for a recovery
            response = self.transport.open("POST", "/chat/completions", body(False))
        except HttpFailure as exc:
            if exc.status is None:
                raise ModelError(f"the endpoint {url} closed its reply stream without an answer{detail}, and then "
                                 f"stopped answering: {exc.message}", hint=LOG_HINT) from None
            raise self._error(exc) from None
        if with_tools and self.options.stream == "auto":
            self._stream_tools = False
            self._notices.append(Notice(f"the endpoint {url} closed a streamed reply with tools without an answer, "
                                        "but answers the same request unstreamed: replies with tools are no longer "
                                        "streamed (endpoint_stream = false skips the first try)."))
            yield from self._take_notices()
        yield from self._read_whole(response, estimate, started)

    def _read_whole(self, response: http.client.HTTPResponse, estimate: int, started: float) -> Iterator[Event]:
        reply = Reply()
        try:
            yield from decode_whole(response.read(), reply)
        except NotJson as exc:
            raise ModelError(f"the endpoint {self.target.url} {exc}") from None
        finally:
            response.close()
        yield from closing_events(reply, estimate, time.monotonic() - started)

    def _open(self, body: Callable[[bool], dict[str, Any]], *, stream: bool,
              with_tools: bool = False) -> http.client.HTTPResponse:
        """POST with retries; adapts once to a server that refuses tool_choice "auto" (vLLM without a
        tool parser) or streamed tool choice (llama-cpp-python's function-calling handlers)."""
        state = {"stream": stream}

        def attempt() -> http.client.HTTPResponse:
            sent = body(state["stream"])
            try:
                return self.transport.open("POST", "/chat/completions", sent)
            except HttpFailure as exc:
                lowered = exc.message.lower()
                if self._refuses_choice(exc, sent):
                    return self.transport.open("POST", "/chat/completions", body(state["stream"]))
                if exc.status == 400 and self._tool_choice == "auto" and any(h in lowered for h in _NO_AUTO_TOOLS_HINTS):
                    self._tool_choice = "none"
                    return self.transport.open("POST", "/chat/completions", body(state["stream"]))
                if state["stream"] and with_tools and self._refuses_streamed_tools(exc):
                    state["stream"] = False
                    return self.transport.open("POST", "/chat/completions", body(False))
                raise

        try:
            return self._retry(attempt)
        except HttpFailure as exc:
            raise self._error(exc) from None

    def _refuses_streamed_tools(self, failure: HttpFailure) -> bool:
        """Whether ``failure`` is a refusal to stream tool choice; in auto mode, stop asking for it."""
        if self.options.stream != "auto" or _NO_STREAMED_TOOLS_HINT not in failure.message.lower():
            return False
        self._stream_tools = False
        self._notices.append(Notice(f"the endpoint {self.target.url} cannot stream replies with tools "
                                    f"({failure.message}): they are no longer streamed."))
        return True

    def _tools_in_prompt(self, tools: Sequence[ToolSpec]) -> bool:
        if self._prompt_tools is None:
            self._prompt_tools = self._probe_tool_rendering(tools)
        return self._prompt_tools

    def _probe_tool_rendering(self, tools: Sequence[ToolSpec]) -> bool:
        """endpoint_tools = auto: does the server's template show the tools to the model? Two
        one-token requests tell (the prompt grows with the tools, or it does not)."""
        def count(with_tools: bool) -> int | None:
            def attempt() -> int | None:
                try:
                    response = self.transport.open("POST", "/chat/completions",
                                                   probe_body(self.model or "default", tools if with_tools else None,
                                                              self._tool_choice))
                except HttpFailure as exc:
                    if with_tools and exc.status == 400 and any(h in exc.message.lower() for h in _NO_TOOLS_HINTS):
                        return 0  # the server takes no tools at all: they have to go into the prompt
                    if with_tools and exc.status == 400 and any(h in exc.message.lower() for h in _NO_AUTO_TOOLS_HINTS):
                        self._tool_choice = "none"
                        response = self.transport.open("POST", "/chat/completions",
                                                       probe_body(self.model or "default", tools, "none"))
                    else:
                        raise
                answer = read_json(response, "POST /chat/completions")
                usage = answer.get("usage") if isinstance(answer, dict) else None
                prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
                return prompt if isinstance(prompt, int) and prompt > 0 else None
            return self._retry(attempt)

        try:
            without, with_tools = count(False), count(True)
        except HttpFailure:
            return False  # the real request will say what is wrong; keep the tools native
        if without is None or with_tools is None or not tools_dropped(without, with_tools, tools):
            return False
        why = ("refuses tools for this model" if with_tools == 0 else
               f"'s chat template leaves the tools out (the prompt grew by {with_tools - without} tokens with them)")
        self._notices.append(Notice(f"the endpoint{' ' if with_tools == 0 else ''}{why}: clovercode describes them in "
                                    "the system prompt instead (endpoint_tools = prompt)."))
        return True

    def _take_notices(self) -> Iterator[Notice]:
        while self._notices:
            yield self._notices.pop(0)

    def _liveness(self) -> str:
        """'' when the server still answers, else why not (a killed server refuses the connection)."""
        try:
            self._quick(self.target.base_path).open("GET", "/models").close()
        except HttpFailure as exc:
            if exc.status is None:
                return f"; it no longer answers ({exc.message})"
        return ""

    def _get_beside_root(self, route: str) -> Any:
        """GET a route beside the API root (``/props`` next to ``/v1``), once, without retries."""
        base = self.target.base_path
        beside = self._quick(base[: -len("/v1")] if base.endswith("/v1") else "")
        return read_json(beside.open("GET", route), f"GET {route}")

    def _quick(self, base_path: str) -> Transport:
        """A transport for questions that must not wait long: the connect timeout bounds the answer too."""
        return Transport(replace(self.target, base_path=base_path), self.options.api_key,
                         self.options.connect_timeout, self.options.connect_timeout)

    def _error(self, failure: HttpFailure) -> CloverError:
        error = domain_error(failure, self.target, self.model)
        if isinstance(error, ContextTooLong) and self.window_assumed:
            match = _WINDOW_IN_ERROR.search(failure.message)
            told = int(next(g for g in match.groups() if g)) if match else None
            if told:  # what the server said is better than the assumption, for the tasks still to come
                self.context_window = told
            error.hint = (f"clovercode assumed a window of {DEFAULT_WINDOW} tokens because the server does not publish "
                          f"its own: set context.window (CLOVERCODE_CONTEXT_WINDOW) to "
                          f"{told if told else 'the server’s context size'}.")
        return error

    def _retry(self, attempt: Callable[[], Any]) -> Any:
        return with_retries(attempt, self.options.retries, backoff=self.options.backoff,
                            max_backoff=self.options.max_backoff, sleep=self._sleep)


def _wire_message(message: Message) -> dict[str, Any]:
    out = message.to_openai()
    if message.role == "assistant" and message.reasoning:
        out["reasoning_content"] = message.reasoning  # templates that keep reasoning between tool calls use it
    return out


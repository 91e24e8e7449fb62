"""The model seam: every backend (embedded engine, endpoint, replay) implements ``ModelBackend``.

``generate`` streams events. Backends that produce raw text (the embedded engine, replay) only yield
``TextDelta``; the loop parses tool calls out of the text. Backends whose server already parsed the
calls yield ``ToolCallEvent`` as well. Every stream ends with exactly one ``Finish``. ``Usage`` may
come more than once (the embedded engine reports the prompt size before it decodes, so a stream the
caller closes early still says what the prompt cost); the last one is the turn's total. A
``Notice`` tells the person something about how the model is reached (an assumed context window, a
fallback the endpoint backend took).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence, Union, runtime_checkable

from clovercode.ground.messages import Message
from clovercode.ground.errors import CloverError, ExitCode
from clovercode.toolcalls.schemas import ToolSpec


@dataclass(frozen=True)
class GenerationParams:
    max_new_tokens: int = 4096
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    thinking: bool = True
    seed: int | None = None
    # OpenAI's tool_choice: "auto" | "required" | "none" | a tool's name; None leaves the output free.
    # Backends that decode themselves (the embedded engine) constrain the output to a grammar of
    # valid calls; others pass it on or ignore it.
    tool_choice: str | None = None
    json_schema: dict[str, Any] | None = None  # the reply must be one JSON value valid against it
    max_prose: int = 0  # tool_choice required / named: tokens of prose before the call (0: the backend's default)
    # tool_choice required / named: close a call still open near the token limit where a value can end
    # (serve's clients asked for a call; never for the agent, whose calls run: a cut value would run cut).
    close_calls: bool = False
    # tool_choice required / named: no this many characters may repeat one unit of at most a quarter
    # of them (the agent's loop guard, kept while decoding instead of cutting the reply; 0: off).
    loop_window: int = 0
    # The namespace the prompt may be kept and reused in (an opaque string; ``serve`` gives each API
    # key its own): a backend that keeps prompts reuses one only within the same scope.
    cache_scope: str = ""


@dataclass(frozen=True)
class TextDelta:
    text: str
    reasoning: bool = False  # True when the server separates reasoning from content


@dataclass(frozen=True)
class ToolCallEvent:
    name: str
    arguments: dict[str, Any] | str  # a string when the server sent arguments it could not decode
    id: str | None = None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    forwards: int | None = None  # model forward passes (engine only)
    cached_tokens: int = 0  # prompt tokens taken from a kept prompt's cache instead of prefilled (engine only)
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Finish:
    reason: str  # "stop" | "length" | "tool_calls" | "stop_string"


@dataclass(frozen=True)
class Notice:
    """Something the person should know about how the model is reached (an assumption, a fallback)."""

    text: str
    loud: bool = False  # a warning to act on; else said dimly, once


Event = Union[TextDelta, ToolCallEvent, Usage, Finish, Notice]


@runtime_checkable
class ModelBackend(Protocol):
    """Optional extras a backend may also offer (callers use ``getattr`` with a fallback):
    ``count_tokens(text) -> int`` with the model's own tokenizer, and ``context_window: int``."""

    name: str

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], params: GenerationParams) -> Iterator[Event]:
        ...

    def close(self) -> None:
        ...


class ModelError(CloverError):
    """Generation failed mid-run (server gone, replay exhausted, out of memory)."""

    exit_code = ExitCode.MODEL_UNAVAILABLE


class ContextTooLong(ModelError):
    """The prompt does not fit the model's context window (compaction or a shorter task may help).
    ``prompt_tokens`` and ``window``, when the backend knows them, let a server word the error the
    way OpenAI clients recognise it."""

    def __init__(self, message: str, *, hint: str | None = None, prompt_tokens: int | None = None,
                 window: int | None = None):
        super().__init__(message, hint=hint)
        self.prompt_tokens, self.window = prompt_tokens, window

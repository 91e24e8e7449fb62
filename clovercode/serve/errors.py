"""Failures as the errors OpenAI clients recognise: status, ``error`` object, and the wording they match.

Clients classify some errors by message text, not code: litellm raises ContextWindowExceededError
when the text holds "This model's maximum context length is" (litellm/litellm_core_utils/
exception_mapping_utils.py), and aider shows its context-window help on that exception. So a context
overflow says exactly what OpenAI and vLLM say, with the same ``code``.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable, Sequence

from clovercode.backends.base import ContextTooLong
from clovercode.ground.errors import CloverError, UsageError
from clovercode.ground.messages import Message
from clovercode.serve.protocol import ApiError
from clovercode.backends.scheduler import ServerStopping


def context_overflow(window: int, prompt_tokens: int, completion_tokens: int, detail: str = "") -> ApiError:
    """OpenAI's (and vLLM's) context-length error, word for word, then clovercode's own detail."""
    text = (f"This model's maximum context length is {window} tokens. However, you requested "
            f"{prompt_tokens + completion_tokens} tokens ({prompt_tokens} in the messages, {completion_tokens} "
            "in the completion). Please reduce the length of the messages or completion.")
    return ApiError(400, f"{text} ({detail})" if detail else text, code="context_length_exceeded", param="messages")


def refuse_overlong(backend: Any, messages: Sequence[Message], max_new_tokens: int) -> None:
    """Refuse at once, before the queue, a request whose messages alone overflow the context window:
    counted with the backend's own tokenizer (the rendered prompt holds every message, plus its
    template). A margin per message absorbs merges across message boundaries, so a prompt that fits
    is never refused here; one near the edge is refused by the backend, after its turn in the queue."""
    count, window = getattr(backend, "count_tokens", None), getattr(backend, "context_window", None)
    if count is None or not isinstance(window, int) or window <= 0:
        return
    text = "\n".join(part for m in messages for part in (m.content, m.reasoning) if part)
    if len(text.encode("utf-8")) <= window:  # a token is at least one byte: it cannot overflow
        return
    try:
        tokens = int(count(text))
    except Exception:  # a tokenizer busy on the model thread, say: the backend's own check still runs
        return
    if tokens > window + 4 * len(messages):
        advice = getattr(backend, "overflow_advice", None)
        said = advice(tokens) if callable(advice) else None  # the memory plan's limit and the mode that fits
        raise context_overflow(window, tokens, max_new_tokens,
                               "the messages alone, counted before queueing" + (f": {said}" if said else ""))


def api_error(error: BaseException, log: Callable[[str], None], job: Any = None, limit_field: str = "max_tokens") -> ApiError:
    """Any failure of a request as the ApiError to answer; a bug's traceback goes to the log only.
    ``limit_field``: the token-limit field the client sent (max_completion_tokens on chat, when it
    used that; max_output_tokens on Responses): an error about the limit names that one."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, ContextTooLong):
        if error.window and error.prompt_tokens is not None:
            completion = job.params.max_new_tokens if job is not None else 0
            return context_overflow(error.window, error.prompt_tokens, completion, error.message)
        return ApiError(400, f"This model's maximum context length is exceeded: {error.message}",
                        code="context_length_exceeded", param="messages")
    if isinstance(error, UsageError):  # the request asked for something this model cannot do
        param = getattr(error, "param", None)
        if param == "max_tokens":
            return ApiError(400, error.message.replace("max_tokens", limit_field), param=limit_field)
        return ApiError(400, error.message, param=param)
    if isinstance(error, ServerStopping):
        return ApiError(503, str(error), type="server_error", code="shutting_down")
    if isinstance(error, CloverError):
        return ApiError(500, f"the model failed: {error.message}", type="server_error", code="model_error")
    log("internal error:\n" + "".join(traceback.format_exception(type(error), error, error.__traceback__)))
    return ApiError(500, "internal error in clovercode serve (the server log has the details)", type="server_error")

"""What a server says about itself: which model to ask for, and how large its context window is.

Each server publishes the window somewhere else: vLLM, SGLang and ``clovercode serve`` as
``max_model_len`` in ``/v1/models``; llama.cpp's server as ``n_ctx`` in ``/props`` (beside the API
root, not under it); SGLang also in ``/get_model_info`` / ``/get_server_info``. The optional routes
are asked once each, without retries: a server without them answers 404 at once.
"""

from __future__ import annotations

import http.client
import json
from typing import Any, Callable

from clovercode.backends.endpoint_http import HttpFailure
from clovercode.ground.errors import ModelUnavailable

LISTING_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length", "n_ctx")
# (route beside the API root, path to the number): llama.cpp's /props, then SGLang's native routes.
ROOT_ROUTES: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("/props", (("default_generation_settings", "n_ctx"), ("n_ctx",))),
    ("/get_model_info", (("context_length",), ("max_context_length",))),
    ("/get_server_info", (("context_length",),)),
)

GetJson = Callable[[str], Any]  # root-relative path → parsed JSON (raises HttpFailure)


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


def window_from_listing(entry: dict[str, Any]) -> int | None:
    for key in LISTING_KEYS:
        window = _positive(entry.get(key))
        if window:
            return window
    return None


def window_from_routes(get_json: GetJson) -> tuple[int, str] | None:
    """(window, where it was read) from the first optional route that publishes one."""
    for route, paths in ROOT_ROUTES:
        try:
            body = get_json(route)
        except HttpFailure:
            continue
        for path in paths:
            window = _positive(_dig(body, path))
            if window:
                return window, route
    return None


def read_json(response: http.client.HTTPResponse, what: str) -> Any:
    try:
        return json.loads(response.read())
    except (json.JSONDecodeError, OSError, http.client.HTTPException) as exc:
        raise HttpFailure(f"{what} returned something that is not JSON ({exc})") from None
    finally:
        response.close()


def _dig(body: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(body, dict):
            return None
        body = body.get(key)
    return body


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

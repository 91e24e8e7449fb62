"""Retrying flaky network calls."""

import functools
import time
from typing import Callable


def retry(times: int = 3, exceptions: tuple = (Exception,), delay: float = 0.0, backoff: float = 2.0,
          sleep: Callable[[float], None] = time.sleep):
    """Decorator: call the function until it returns, at most ``times`` times in all.

    Only the exception types in ``exceptions`` are retried; any other exception propagates at
    once. After the last attempt fails, its exception propagates. Between attempts it waits
    ``delay`` seconds, multiplied by ``backoff`` after each wait (delay, delay*backoff, ...),
    by calling ``sleep``. ``times`` below 1 is a ValueError, raised when the decorator is made.
    The decorated function keeps its name and docstring.
    """
    raise NotImplementedError("retry is not written yet")

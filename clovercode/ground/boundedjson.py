"""JSON parsed with a depth limit, for files that come with a model (config.json, tokenizer_config.json,
safetensors headers): Python's parser recurses once per level, so a 100,000-deep ``[[[[…`` file
ended in a RecursionError (exit 70) instead of a clear refusal naming the file.

Ground floor: standard library only.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 128  # real model files nest under 10 deep; serde_json (tokenizers, safetensors) stops at 128
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = re.compile(r"[\[\]{}]")


class TooDeep(ValueError):
    """The JSON nests past the limit (a ValueError, as json.JSONDecodeError is)."""


def depth(text: str, limit: int = MAX_DEPTH) -> int:
    """How deep ``text`` nests, counted up to the first level past ``limit``. Strings are removed
    first (in C), so only the brackets themselves are walked, iteratively."""
    level = deepest = 0
    for match in _BRACKETS.finditer(_STRINGS.sub('""', text)):
        if match.group() in "[{":
            level += 1
            if level > deepest:
                deepest = level
                if deepest > limit:
                    break
        else:
            level -= 1
    return deepest


def loads(data: str | bytes, limit: int = MAX_DEPTH) -> Any:
    """``json.loads(data)``, or :class:`TooDeep` when it nests more than ``limit`` levels."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    if depth(text, limit) > limit:
        raise TooDeep(f"it nests more than {limit} levels deep")
    try:
        return json.loads(text)
    except RecursionError:  # a net under the count: never a traceback
        raise TooDeep(f"it nests too deep to parse (over {limit} levels)") from None

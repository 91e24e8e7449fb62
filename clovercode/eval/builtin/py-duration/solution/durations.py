"""Durations in configuration files: "90s", "15m", "1h30m", "2d"."""

import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+)([smhd])")


def parse_duration(text: str) -> int:
    """Seconds in a duration such as "1h30m" (components are added up).

    Raises ValueError for anything that is not a sequence of <number><unit> parts.
    """
    text = text.strip()
    if not text or _PART.sub("", text):
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(number) * UNITS[unit] for number, unit in _PART.findall(text))


def format_duration(seconds: int) -> str:
    """The inverse of parse_duration for whole seconds: 5400 -> "1h30m"."""
    if seconds == 0:
        return "0s"
    out = []
    for unit in ("d", "h", "m", "s"):
        count, seconds = divmod(seconds, UNITS[unit])
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)

"""Version strings of our plugins: parsing, comparing, picking the newest."""

from typing import Iterable


def parse_version(text: str) -> tuple:
    """"v1.2.3", "1.2.3" or "1.2" -> a tuple that sorts in version order ("1.2" means "1.2.0")."""
    text = text.strip()
    if text.startswith(("v", "V")):
        text = text[1:]
    parts = text.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a version: {text!r}")
    while len(parts) < 3:
        parts.append("0")
    return tuple(parts)


def compare(a: str, b: str) -> int:
    """-1 if a is older than b, 0 if they are the same version, 1 if a is newer."""
    left, right = parse_version(a), parse_version(b)
    return (left > right) - (left < right)


def latest(versions: Iterable[str]) -> str:
    """The newest of ``versions`` (as written); ValueError when there are none."""
    versions = list(versions)
    if not versions:
        raise ValueError("no versions given")
    return max(versions, key=parse_version)

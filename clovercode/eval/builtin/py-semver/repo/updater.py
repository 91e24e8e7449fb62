"""Decides whether a plugin needs an update."""

from versions import compare


def needs_update(installed: str, available: str) -> bool:
    return compare(installed, available) < 0

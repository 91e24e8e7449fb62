"""Checks shared by sign-up and profile changes."""

import re

_EMAIL = re.compile(r"[a-z0-9._%+-]+@[a-z0-9-]+(\.[a-z0-9-]+)*\.[a-z]{2,}")


def is_valid_email(address: str) -> bool:
    """Whether ``address`` (already stripped and lower-cased) looks like an e-mail address."""
    return _EMAIL.fullmatch(address) is not None

"""Sign-up: creating accounts."""

import re

from accounts.store import AccountStore


class SignupError(ValueError):
    pass


def sign_up(store: AccountStore, email: str, password: str) -> dict:
    email = email.strip().lower()
    if not re.fullmatch(r"[a-z0-9._%+-]+@[a-z0-9-]+(\.[a-z0-9-]+)*\.[a-z]{2,}", email):
        raise SignupError(f"invalid e-mail address: {email!r}")
    if len(password) < 8:
        raise SignupError("password must have at least 8 characters")
    if store.find(email):
        raise SignupError("an account with this e-mail address exists")
    return store.add(email, password)

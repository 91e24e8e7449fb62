"""Sign-up: creating accounts."""

from accounts.store import AccountStore
from accounts.validation import is_valid_email


class SignupError(ValueError):
    pass


def sign_up(store: AccountStore, email: str, password: str) -> dict:
    email = email.strip().lower()
    if not is_valid_email(email):
        raise SignupError(f"invalid e-mail address: {email!r}")
    if len(password) < 8:
        raise SignupError("password must have at least 8 characters")
    if store.find(email):
        raise SignupError("an account with this e-mail address exists")
    return store.add(email, password)

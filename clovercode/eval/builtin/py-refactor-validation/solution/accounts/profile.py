"""Profile changes."""

from accounts.store import AccountStore
from accounts.validation import is_valid_email


class ProfileError(ValueError):
    pass


def change_email(store: AccountStore, old: str, new: str) -> dict:
    new = new.strip().lower()
    if not is_valid_email(new):
        raise ProfileError(f"invalid e-mail address: {new!r}")
    account = store.find(old)
    if account is None:
        raise ProfileError(f"no account for {old!r}")
    if store.find(new):
        raise ProfileError("an account with this e-mail address exists")
    return store.rename(old, new)

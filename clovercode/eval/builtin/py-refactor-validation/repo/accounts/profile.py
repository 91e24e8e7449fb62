"""Profile changes."""

import re

from accounts.store import AccountStore


class ProfileError(ValueError):
    pass


def change_email(store: AccountStore, old: str, new: str) -> dict:
    new = new.strip().lower()
    if not re.fullmatch(r"[a-z0-9._%+-]+@[a-z0-9-]+(\.[a-z0-9-]+)*\.[a-z]{2,}", new):
        raise ProfileError(f"invalid e-mail address: {new!r}")
    account = store.find(old)
    if account is None:
        raise ProfileError(f"no account for {old!r}")
    if store.find(new):
        raise ProfileError("an account with this e-mail address exists")
    return store.rename(old, new)

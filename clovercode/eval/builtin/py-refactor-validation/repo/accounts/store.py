"""In-memory account storage (a database in production)."""


class AccountStore:
    def __init__(self):
        self._accounts: dict[str, dict] = {}

    def find(self, email: str) -> dict | None:
        return self._accounts.get(email)

    def add(self, email: str, password: str) -> dict:
        account = {"email": email, "password_length": len(password)}
        self._accounts[email] = account
        return account

    def rename(self, old: str, new: str) -> dict:
        account = self._accounts.pop(old)
        account["email"] = new
        self._accounts[new] = account
        return account

"""Who may use ``clovercode serve``, and what one client may learn about another.

Pure rules, no HTTP: the server (clovercode/serve/) asks them.

- A server reachable from other machines needs API keys: :func:`is_loopback` says whether a bind
  address is this machine only.
- Each API key is a tenant (:func:`read_keys_file`); keys are compared in constant time
  (:func:`tenant_of`).
- Prompts kept for reuse are reused only within one namespace (:func:`cache_scope`): the tenant,
  narrowed by the client's own ``prompt_cache_key`` / ``cache_salt``. A reply's ``cached_tokens``
  then cannot tell one tenant what another sent.
"""

from __future__ import annotations

import hmac
import ipaddress
import stat
from pathlib import Path

from clovercode.ground.errors import UsageError

MIN_KEY_CHARS = 16  # a key shorter than this is guessable over the network
MAX_CLIENT_CACHE_KEY = 256  # characters of a client's prompt_cache_key / cache_salt


def is_loopback(host: str) -> bool:
    """Is ``host`` (a bind address) reachable from this machine only? Names other than
    ``localhost`` are not resolved: they count as reachable."""
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_keys_file(path: Path) -> dict[str, str]:
    """A keys file → {key: tenant}. One key a line, ``NAME KEY`` or just ``KEY`` (then the tenant is
    ``key<LINE>``); blank lines and ``#`` comments are skipped. The file must not be readable by
    others, every key must be long enough, and no key or name may appear twice."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the API keys file {path}: {getattr(exc, 'strerror', None) or exc}",
                         hint="serve.api_keys_file / --api-keys-file names a text file, one 'NAME KEY' a line.") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(f"the API keys file {path} is readable by other users",
                         hint=f"Run: chmod 600 {path}")
    keys: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2:
            raise UsageError(f"{path}:{number}: expected 'NAME KEY' or 'KEY', found {len(words)} words")
        name, key = (words[0], words[1]) if len(words) == 2 else (f"key{number}", words[0])
        add_key(keys, key, name, f"{path}:{number}")
    if not keys:
        raise UsageError(f"the API keys file {path} holds no key", hint="Write one 'NAME KEY' a line.")
    return keys


def add_key(keys: dict[str, str], key: str, tenant: str, where: str, min_chars: int = MIN_KEY_CHARS) -> None:
    """Add one key (checked) to ``keys``."""
    if len(key) < min_chars:
        raise UsageError(f"{where}: an API key must have at least {min_chars} characters",
                         hint="Make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    if key in keys:
        raise UsageError(f"{where}: this API key is listed twice (tenants '{keys[key]}' and '{tenant}')")
    if tenant in keys.values():
        raise UsageError(f"{where}: the tenant name '{tenant}' is used twice: each key needs its own name")
    keys[key] = tenant


def tenant_of(token: str, keys: dict[str, str]) -> str | None:
    """The tenant whose key ``token`` is, else None. Every key is compared, each in constant time,
    so the answer's timing does not say how much of a key was right or which key it nearly was."""
    found = None
    given = token.encode("utf-8", "surrogateescape")
    for key, tenant in keys.items():
        if hmac.compare_digest(given, key.encode("utf-8", "surrogateescape")):
            found = tenant
    return found


def cache_scope(tenant: str, client_key: str | None) -> str:
    """The namespace a request's prompt may be reused in: its tenant, narrowed by the key the client
    chose. Unambiguous: no (tenant, client key) pair gives another pair's scope. "" (shared by all)
    only for the one tenant of a server without keys that sent no key."""
    if not tenant and not client_key:
        return ""
    return f"{len(tenant)}:{tenant}/{client_key or ''}"


def tenant_scope_prefix(tenant: str) -> str:
    """What every :func:`cache_scope` of ``tenant`` starts with, and no other tenant's does: a
    cache reset asked for by a tenant drops exactly the prompts kept in these scopes."""
    return f"{len(tenant)}:{tenant}/"

"""Secrets by content where names fail: a file whose first bytes have the shape of a credential is
treated as a host secret whatever it is called, and so is a file with other hard links that git does
not track (a second name for a file elsewhere, such as ~/.aws/credentials).

Names are chosen by whoever made the file: a CI checkout leaves `gha-creds-1a2b.json` (a Google
service-account key) in the workspace, a key pasted into `notes.txt` is still a key. Each shape
below is specific enough that source code which merely mentions it (a parser's constant, a
docstring) does not match: a PEM private-key header must be followed by its base64 body, a Google
credential needs both its type and a secret field, an AWS secret needs its 40 characters.
docs/security.md, "The project view".
"""

from __future__ import annotations

import re

HEAD_BYTES = 4096  # the shapes all sit at the start of a credential file

_PEM_HEAD = rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
_SHAPES = (
    # PEM / OpenSSH / PGP private keys: the header, optional "Key: value" headers, then base64.
    re.compile(_PEM_HEAD + rb"\r?\n(?:[A-Za-z-]+: [^\n]*\r?\n)*\r?\n?[A-Za-z0-9+/]{20}"),
    # ... and the same inside JSON or an env file, newlines escaped ("private_key": "-----BEGIN ...\n MII").
    re.compile(_PEM_HEAD + rb"(?:\\r)?\\n[A-Za-z0-9+/]{20}"),
    re.compile(rb"PuTTY-User-Key-File-\d+: "),
    # AWS: a secret access key assigned its 40 characters (credentials files, .env files).
    re.compile(rb"(?i)aws_secret_access_key\s*[=:]\s*[\"']?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])"),
)
# Google credential JSON (service accounts, workload identity as google-github-actions/auth writes
# gha-creds-*.json, user refresh tokens): its type and one of its secret-bearing fields.
_GOOGLE_TYPE = re.compile(rb'"type"\s*:\s*"(?:service_account|external_account|authorized_user|'
                          rb'impersonated_service_account|gdch_service_account|external_account_authorized_user)"')
_GOOGLE_SECRET = re.compile(rb'"(?:private_key|client_secret|refresh_token|credential_source|'
                            rb'service_account_impersonation_url|token_url)"\s*:')


def looks_like_credential(head: bytes) -> bool:
    """Whether ``head`` (a file's first :data:`HEAD_BYTES`) has the shape of a credential."""
    if any(shape.search(head) for shape in _SHAPES):
        return True
    return bool(_GOOGLE_TYPE.search(head) and _GOOGLE_SECRET.search(head))

"""Where the CI workflow installs clovercode from: a source the user controls and pins, never a PyPI name.

clovercode is not published on PyPI. ``pip install clovercode`` fails today, and the day someone else
takes the name it would run their code next to the repository's write token. So the workflow installs
a direct reference — a git URL at a full commit (or a version tag), or a wheel file or URL — that
``clovercode ci init --source`` checks here, or that the repository variable ``CLOVERCODE_SOURCE``
names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import metadata

from clovercode.ground.errors import UsageError

_SHA_RE = re.compile(r"[0-9a-f]{40}")
_VERSION_TAG_RE = re.compile(r"v?\d+(\.\d+)+([.+-][A-Za-z0-9.]+)*")
_WHEEL_HASH_RE = re.compile(r"#sha256=[0-9a-f]{64}$")
_ALLOWED_RE = re.compile(r"[A-Za-z0-9_.:/@+#=%~-]+")  # lands in a double-quoted YAML string and a shell word
EXAMPLE = "git+https://github.com/OWNER/clovercode@<full commit sha>"


@dataclass(frozen=True)
class Source:
    url: str
    warning: str | None = None  # said loudly by `ci init`; the source is still used


def check_source(url: str) -> Source:
    """``url`` if it is a pinned source; UsageError for a package name or a moving git ref."""
    is_wheel = url.endswith(".whl") or ".whl#" in url
    if not url.startswith("git+") and not is_wheel:
        raise UsageError(f"--source {url!r} is not a git URL or a wheel: a package name would install whatever PyPI "
                         "serves under that name (clovercode is not published there)",
                         hint=f"Pass a source you control, pinned: {EXAMPLE} (or a version tag), or a wheel path/URL.")
    if not _ALLOWED_RE.fullmatch(url):
        raise UsageError(f"--source {url!r} has characters that do not belong in a URL or a path")
    if url.startswith("git+"):
        return _check_git(url)
    if url.startswith("http://"):
        raise UsageError(f"--source {url}: a wheel over plain http can be swapped on the way; use https")
    if url.startswith("https://") and not _WHEEL_HASH_RE.search(url):
        return Source(url, f"the wheel {url} is not pinned by its hash: whoever controls that address controls "
                           "what the workflow runs. Append #sha256=<the wheel's sha256> to pin it.")
    return Source(url)


def _check_git(url: str) -> Source:
    scheme_end = url.find("://")
    path = url[scheme_end + 3:] if scheme_end != -1 else ""
    ref = path.rsplit("@", 1)[1] if "@" in path.split("/", 1)[-1] else ""
    ref = ref.split("#", 1)[0]
    if _SHA_RE.fullmatch(ref):
        return Source(url)
    if _VERSION_TAG_RE.fullmatch(ref):
        return Source(url, f"the tag {ref} pins the source only as long as nobody moves it; a full commit sha "
                           "cannot be moved")
    what = f"the ref {ref!r} looks like a branch" if ref else "no ref is named"
    raise UsageError(f"--source {url}: {what}, so every run would install whatever it points to then",
                     hint=f"Pin it: end the URL with @<full commit sha> (e.g. {EXAMPLE}) or @<version tag>.")


def installed_source() -> str | None:
    """The pinned git source this clovercode was installed from (pip's direct_url.json), if any."""
    try:
        raw = metadata.distribution("clovercode").read_text("direct_url.json")
        info = json.loads(raw) if raw else None
    except (metadata.PackageNotFoundError, ValueError, OSError):
        return None
    vcs = (info or {}).get("vcs_info") or {}
    url, commit = (info or {}).get("url"), vcs.get("commit_id")
    if vcs.get("vcs") != "git" or not isinstance(url, str) or not isinstance(commit, str) or url.startswith("file:"):
        return None
    candidate = f"git+{url}@{commit}"
    try:
        return check_source(candidate).url
    except UsageError:
        return None


def requirement(url: str, extras: str) -> str:
    """The pip requirement installing clovercode (with ``extras``) from ``url``: a PEP 508 direct reference."""
    return f"clovercode{extras} @ {url}"

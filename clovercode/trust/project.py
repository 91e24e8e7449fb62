"""Is this project trusted, and which settings may its ``clovercode.toml`` set?

A project is untrusted until its user trusts it: by answering yes to the REPL's "Trust this folder?"
(which lists it in ``trusted_projects`` in the user config), by listing it there themselves, or with
``--trust-project`` for one ``fix`` / ``exec`` run (CI, where the repository's owner wrote the file).

- An **untrusted** project's file may set only :data:`UNTRUSTED_MAY_SET`: settings that shape what
  the model sees or how long things take inside the sandbox.
- A **trusted** project's file may set every other setting too, except :data:`NEVER_FROM_PROJECT`:
  who answers (the model), what needs asking (approvals, permissions), where clovercode writes, where
  code, keys and tokens go, and remote code. A project never loosens the sandbox either
  (:func:`sandbox_is_stricter`).

What a project may not set is ignored, with one note naming the keys: a cloned repository must not
be able to brick the tool, nor to change what it does behind its user's back. docs/security.md
("Trust: projects and their settings") and docs/configuration.md show these tables.

Ground floor: imports nothing from clovercode but the settings table.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterable

from clovercode.ground.settings import SANDBOX_POLICIES

# Patterns (fnmatch) of settings no project file sets, trusted or not. Checked first, so a new key
# whose name says it is a location, a token or a target is never-from-project without a decision.
NEVER_FROM_PROJECT: tuple[str, ...] = (
    "model",  # who answers: a repository must not script "the model" (replay:FILE) or ship one (./m)
    "approval", "permissions.*",  # what is asked before acting
    "engine.trust_remote_code",  # a model's own Python code
    "engine.quantization",  # what loads, and how much memory it takes: the user's card, the user's choice
    "endpoint", "endpoint_*", "*api_key", "*_token", "github.*", "serve.*",  # where code, keys and tokens go
    "fix.base", "fix.remote",  # where the pull request and the push go
    "*_dir", "*_file", "*_path",  # where clovercode writes (history, trajectories, caches)
    "sandbox_hide", "sandbox_show",  # what the sandbox hides and shows is the user's list (docs/security.md)
)

# Patterns of settings an untrusted project's file may set: what the model sees, how it decodes, and
# budgets of time and size. The test command runs in the sandbox like any command of the model's.
UNTRUSTED_MAY_SET: tuple[str, ...] = (
    "temperature", "top_p", "max_new_tokens", "thinking",
    "max_steps", "max_time", "max_tokens", "max_format_errors", "max_repeats", "repetition_window",
    "command_timeout", "output_limit",
    "sandbox",  # only to a stricter policy (sandbox_is_stricter)
    "fix.test_command", "fix.test_timeout", "fix.test_rounds", "fix.baseline",
    "context.*",
    "engine.block_size", "engine.strategy", "engine.threshold", "engine.top_k", "engine.steps",
    "engine.tool_choice", "engine.tool_prose",
)

# Why a key was ignored; :func:`ignored_note` groups the keys by these.
NEVER = "never"  # not from any project file
UNTRUSTED = "untrusted"  # only from a trusted project's file
LOOSER = "looser"  # a sandbox looser than the one in force


@dataclass(frozen=True)
class Ignored:
    key: str
    value: Any
    why: str  # NEVER, UNTRUSTED or LOOSER


def _matches(key: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(key, pattern) for pattern in patterns)


def project_may_set(key: str, trusted: bool) -> str | None:
    """None when a project file (trusted or not, as given) may set ``key``, else why not."""
    if _matches(key, NEVER_FROM_PROJECT):
        return NEVER
    if trusted or _matches(key, UNTRUSTED_MAY_SET):
        return None
    return UNTRUSTED


def sandbox_is_stricter(wanted: str, current: str) -> bool:
    """A project may choose a sandbox at least as strict as the one in force, never a looser one."""
    order = list(SANDBOX_POLICIES)  # strictest first
    return wanted in order and current in order and order.index(wanted) <= order.index(current)


def check_project_value(key: str, value: Any, trusted: bool, current: Any) -> Ignored | None:
    """None when the project's ``key = value`` applies; else what is ignored and why."""
    why = project_may_set(key, trusted)
    if why is None and key == "sandbox" and value in SANDBOX_POLICIES and not sandbox_is_stricter(value, current):
        why = LOOSER
    return None if why is None else Ignored(key, value, why)


def is_trusted(project: Path, trusted_projects: Iterable[str]) -> bool:
    """Is ``project`` (a directory) one of ``trusted_projects`` (the user's list; exact directories)?"""
    here = project.resolve()
    return any(Path(p).expanduser().resolve() == here for p in trusted_projects)


def how_to_trust(project: Path, user_file: Path) -> str:
    return (f"trust this folder when the REPL asks, pass --trust-project to fix/exec, or add \"{project}\" to "
            f"trusted_projects in {user_file}")


def ignored_note(source: str, ignored: list[Ignored], project: Path, user_file: Path) -> str | None:
    """One line naming every ignored key of ``source`` and why, or None when nothing was ignored."""
    if not ignored:
        return None
    parts = []
    for why, reason in ((NEVER, "a project file never sets these; set them in your user config, the environment "
                                "or with flags"),
                        (LOOSER, "a project may only make the sandbox stricter"),
                        (UNTRUSTED, "this project is not trusted: " + how_to_trust(project, user_file))):
        keys = [i.key for i in ignored if i.why == why]
        if keys:
            parts.append(f"{', '.join(keys)} ({reason})")
    return f"{source}: ignored " + "; ignored ".join(parts)


def reason_text(why: str) -> str:
    """Why one key was ignored, in a few words (``config show``)."""
    return {NEVER: "a project file never sets it", LOOSER: "a project may only make the sandbox stricter",
            UNTRUSTED: "this project is not trusted"}[why]

"""Domain errors and the exit codes the CLI maps them to.

Every error a user can cause carries a message written for that user (what failed, how to fix it).
The CLI turns these into exit codes in one place; nothing else calls ``sys.exit``.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Documented exit codes of ``clovercode`` (see docs/usage.md)."""

    OK = 0  # fix: finished (and tests passed, when tests ran)
    TESTS_FAILED = 1  # fix: changes made but the project's tests fail
    USAGE = 2  # bad flags, bad config, bad input files
    GAVE_UP = 3  # budget exhausted, repeated failures, too many format errors
    NO_CHANGE = 4  # fix: the model finished without changing anything
    MODEL_UNAVAILABLE = 5  # model missing, failed to load, endpoint unreachable
    SANDBOX_UNAVAILABLE = 6  # the sandbox cannot start on this host
    VCS_ERROR = 7  # git / push / pull-request failure (local work is kept)
    CI_CHANGE_REFUSED = 8  # fix: the change touches CI definitions or git hooks (--allow-ci-changes)
    UNVERIFIED = 9  # fix: committed, nothing regressed, but no test shows the issue fixed
    INTERNAL = 70  # a bug in clovercode
    HUNG_UP = 129  # SIGHUP (the terminal went away), handled like Ctrl-C
    INTERRUPTED = 130  # Ctrl-C
    TERMINATED = 143  # SIGTERM (how CI cancels a job), handled like Ctrl-C


class CloverError(Exception):
    """Base of errors meant for a person: ``str(err)`` is the message, ``exit_code`` the outcome."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n{self.hint}"


class UsageError(CloverError):
    exit_code = ExitCode.USAGE


class ConfigError(UsageError):
    """A config file, env var or flag has an unknown key or a bad value; names the source and key."""


class ModelUnavailable(CloverError):
    exit_code = ExitCode.MODEL_UNAVAILABLE


class SandboxUnavailable(CloverError):
    exit_code = ExitCode.SANDBOX_UNAVAILABLE


class VcsError(CloverError):
    exit_code = ExitCode.VCS_ERROR


class CiChangeRefused(CloverError):
    """fix: the change would commit CI definitions or hooks; nothing was committed (work kept)."""

    exit_code = ExitCode.CI_CHANGE_REFUSED

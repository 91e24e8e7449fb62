"""Pure functions: (policy, surveyed layout, command) → the bubblewrap argument list and the
environment bwrap itself starts with. Everything about the host is in ``Layout`` (see survey.py),
so these are tested by comparing whole lists."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Mapping, Sequence

from clovercode.sandboxing.policy import Policy

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
HOSTNAME = "sandbox"


@dataclass(frozen=True)
class Layout:
    """What the survey found on the host; all paths absolute and resolved."""

    project: str
    cwd: str
    read_only: tuple[str, ...] = ()  # protected project paths that exist (re-bound read-only)
    pinned: tuple[str, ...] = ()  # their parent directories inside the project, bound onto themselves
    absent_protected: tuple[str, ...] = ()  # protected project paths that do not exist yet
    hidden_dirs: tuple[str, ...] = ()
    hidden_files: tuple[str, ...] = ()
    masked: tuple[str, ...] = ()  # host directories replaced by an empty tmpfs
    exposed: tuple[str, ...] = ()  # host paths inside masked directories, re-bound read-only
    writable: tuple[str, ...] = ()  # scratch directories outside the project a caller lets the command write
    homes: tuple[str, ...] = ()  # home directories replaced by an empty private tmpfs
    home_visible: tuple[str, ...] = ()  # what of them is bound back read-only (caches, toolchains)
    scrub: tuple[str, ...] = ()  # git config files to show only as a copy rebuilt from an allowlist
    covers: tuple[tuple[str, str], ...] = ()  # (copy on the host, path it is bound over), read-only
    shown: tuple[str, ...] = ()  # host directories a caller shows read-only at their own path (fix --attempts: the toolchain its worktrees link to)
    protected_patterns: tuple[tuple[str, str], ...] = ()  # (base, entry): protected entries, any spelling
    protected_present: tuple[str, ...] = ()  # the paths naming them that existed before the command


def bwrap_argv(policy: Policy, layout: Layout, command: Sequence[str], status_fd: int | None = None) -> list[str]:
    """bwrap's arguments (without the program name) for running ``command`` under ``policy``.

    Order matters: later mounts cover earlier ones, so the read-only root comes first, then the
    private /tmp and masks, then the project, then what must stay read-only or hidden inside it.
    """
    argv = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not policy.network:
        argv.append("--unshare-net")
    # Root keeps its capabilities inside a user namespace unless they are dropped; with them it
    # could remount / writable. die-with-parent + the PID namespace end every process of the command.
    argv += ["--hostname", HOSTNAME, "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in layout.masked:
        argv += ["--tmpfs", path]
    for path in layout.exposed:
        argv += ["--ro-bind", path, path]
    # The home goes, then the little a build needs comes back; the project and scratch directories
    # come after, so a project under the home is there as always.
    for path in layout.homes:
        argv += ["--tmpfs", path]
    for path in layout.home_visible:
        argv += ["--ro-bind", path, path]
    # After the private /tmp and the masks, which would otherwise cover a scratch directory there.
    for path in layout.writable:
        argv += ["--bind", path, path]
    argv += ["--bind" if policy.project_writable else "--ro-bind", layout.project, layout.project]
    # A mount point cannot be renamed or removed: without this, `mv .config x` would carry the
    # read-only .config/fish away and leave a writable place for a new one.
    for path in layout.pinned:
        argv += ["--bind", path, path]
    for path in layout.shown:  # after the private /tmp and the home, which would cover them
        argv += ["--ro-bind", path, path]
    for path in layout.read_only:
        argv += ["--ro-bind", path, path]
    for path in layout.hidden_dirs:
        argv += ["--tmpfs", path, "--remount-ro", path]
    for path in layout.hidden_files:
        argv += ["--ro-bind", "/dev/null", path]
    for source, target in layout.covers:
        argv += ["--ro-bind", source, target]
    if status_fd is not None:
        argv += ["--json-status-fd", str(status_fd)]
    argv += ["--chdir", layout.cwd, "--", *command]
    return argv


def sandbox_env(policy: Policy, host_env: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted part of ``host_env`` (never a denied name), plus the policy's fixed values.

    bwrap is started with exactly this environment: ``--clearenv`` alone would leave the caller's
    environment readable in /proc/1/environ, which is bwrap's own process.
    """
    env = scrubbed_env(host_env, policy.env_allow, policy.env_deny)
    env.update(policy.env_set)
    env.setdefault("PATH", DEFAULT_PATH)
    return dict(sorted(env.items()))


def scrubbed_env(host_env: Mapping[str, str], allow: Sequence[str], deny: Sequence[str]) -> dict[str, str]:
    """The variables of ``host_env`` an ``allow`` pattern names and no ``deny`` pattern does (hooks
    get this too: sandbox/environment.toml is the one list of what may pass)."""
    return {name: value for name, value in host_env.items()
            if _matches(name, allow) and not _matches(name.upper(), deny)}


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)

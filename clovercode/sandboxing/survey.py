"""Look at the host once per command: which protected, hidden and masked paths exist, so the pure
argv builder gets plain facts. Also the after-run guard for protected paths that did not exist."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from clovercode.ground.errors import SandboxUnavailable
from clovercode.sandboxing.argv import Layout
from clovercode.sandboxing.envstores import env_stores, may_hide
from clovercode.sandboxing.policy import Policy, expand_patterns, home_dirs
from clovercode.trust.paths import protected_on_disk, runs_outside_entries
from clovercode.trust.treewalk import remove_tree

PRIVATE_TMP = "/tmp"
SYSTEM_GITCONFIG = "/etc/gitconfig"


def survey(policy: Policy, project: Path, cwd: Path, env: Mapping[str, str]) -> Layout:
    root = os.path.realpath(project)
    if root == "/":
        raise SandboxUnavailable("the project directory is /; a sandbox that may write / protects nothing",
                                 hint="Run clovercode in a project directory.")
    here = os.path.realpath(cwd)
    if not _within(here, root):
        here = root
    read_only, absent = [], []
    patterns = [(root, rel) for rel in policy.read_only]
    if policy.runs_outside:  # CI definitions and the tree's hooks directory: git tells where that is
        patterns += runs_outside_entries(Path(root), policy.runs_outside)
    # The spelling as listed (bound when it exists, removed afterwards when a command makes it), and
    # every spelling already on disk that names the same file on some checkout (`.VSCode`, `.Envrc`,
    # each `.lintstagedrc*`): one file on macOS and Windows, so read-only here too.
    present = protected_on_disk(root, patterns)
    protected = [os.path.join(base, rel) for base, rel in patterns if not glob.has_magic(rel)]
    protected = [p for p in protected if _within(p, root)] + present
    for path in dict.fromkeys(protected):
        if os.path.exists(path):
            read_only.append(path)
        elif not os.path.lexists(path):
            absent.append(path)
    pinned = [parent for path in read_only for parent in _parents_below(path, root)]
    masked = [m for m in policy.masked if os.path.isdir(m) and not os.path.islink(m)]
    exposed = [os.path.realpath(e) for e in policy.expose
               if os.path.exists(e) and any(_within(os.path.realpath(e), m) for m in masked)]
    # A toolchain that lives under /tmp or a masked directory (a CI checkout's virtualenv in /tmp,
    # say) would vanish behind the private /tmp: keep it visible, read-only.
    exposed += [path for path in _toolchain(env) if _hidden_below(path, root, masked)]
    stores = _existing(expand_patterns(policy.hidden, home_dirs(env)))
    homes, shown, scrub = _home(policy, root, masked, env, [os.path.realpath(p) for p in stores])
    hidden_dirs, hidden_files = [], []
    moved = [p for p in env_stores(env, home_dirs(env)) if os.path.lexists(p)]
    for path in [*stores, *moved]:
        real = os.path.realpath(path)
        if not may_hide(real, root):
            continue  # hiding it would hide the project itself, or break every command
        if not _visible(real, root, masked):
            continue
        (hidden_dirs if os.path.isdir(real) else hidden_files).append(real)
    scrub += [p for p in _git_config(root) if _visible(p, root, masked)]
    # git's system config (Debian's, and most distributions' place for it) is shown rebuilt too
    scrub += [p for p in (SYSTEM_GITCONFIG,) if os.path.isfile(p) and not os.path.islink(p) and _visible(p, root, masked)]
    return Layout(root, here, tuple(read_only), tuple(dict.fromkeys(pinned)), tuple(absent),
                  tuple(dict.fromkeys(hidden_dirs)), tuple(dict.fromkeys(hidden_files)), tuple(masked),
                  tuple(dict.fromkeys(exposed)), homes=homes, home_visible=shown, scrub=tuple(dict.fromkeys(scrub)),
                  protected_patterns=tuple(patterns), protected_present=tuple(present))


def _home(policy: Policy, root: str, masked: list[str], env: Mapping[str, str],
          stores: list[str]) -> tuple[tuple[str, ...], tuple[str, ...], list[str]]:
    """(homes to hide, what of them comes back read-only, git config files there to show rebuilt).

    What comes back is exact paths from the user and clovercode, never from the project: the
    shipped list and the user's ``sandbox_show``, and each ``PATH`` directory under the home as
    itself. Nothing is widened to the home's
    top-level directory that holds it (``~/.local/bin`` is not ``~/.local``), and nothing inside a
    credential store (``stores``, resolved) comes back."""
    homes = []
    for home in home_dirs(env):
        real = os.path.realpath(home)
        # a home inside the project, or the private /tmp (tests), is not the host's to hide
        if os.path.isdir(real) and real != "/" and not _within(real, root) and _visible(real, root, masked):
            homes.append(real)
    homes = list(dict.fromkeys(homes))
    if not homes:
        return (), (), []
    shown = []
    for path in _existing(expand_patterns(policy.home_visible, tuple(homes))):
        real = os.path.realpath(path)
        # a link is not followed: its target would show without the hidden list applied to it
        if real == os.path.abspath(path) and any(_within(real, h) for h in homes):
            shown.append(real)
    for path in _toolchain_in_home(env, homes):
        if not _within(path, root) and not any(_within(path, store) for store in stores):
            shown.append(path)
    shown = [p for p in dict.fromkeys(shown) if not any(_within(p, q) and p != q for q in shown)]
    scrub = [os.path.realpath(p) for p in _existing(expand_patterns(policy.home_scrubbed, tuple(homes)))
             if os.path.isfile(p)]
    return tuple(homes), tuple(shown), [p for p in scrub if any(_within(p, h) for h in homes)]


def _toolchain_in_home(env: Mapping[str, str], homes: list[str]) -> list[str]:
    """The ``PATH`` directories under a home, each alone (``~/.cargo/bin``, never ``~/.cargo``).

    No interpreter prefix comes back on its own: a project's ``pyvenv.cfg`` names one (and so
    would choose what of the home it sees), and even clovercode's own ``sys.base_prefix`` is read
    from a virtualenv's ``pyvenv.cfg``. Interpreters under the home come back through the shipped
    list (pyenv, uv, conda, pipx …) or the user's ``sandbox_show``; those outside it are visible."""
    found = []
    for path in (os.path.realpath(p) for p in env.get("PATH", "").split(os.pathsep) if os.path.isabs(p)):
        if any(_within(path, h) and path != h for h in homes) and os.path.isdir(path):
            found.append(path)
    return list(dict.fromkeys(found))


def _git_config(root: str) -> list[str]:
    """The config files git reads for the repository holding ``root``: its ``config`` and, with
    ``extensions.worktreeConfig``, ``config.worktree`` (shown rebuilt: a checkout may have left a
    token there). For a linked worktree or a submodule (a ``.git`` file) they lie in the git
    directory it names, which git tells."""
    here = root
    while True:
        dotgit = os.path.join(here, ".git")
        if os.path.isdir(dotgit) and not os.path.islink(dotgit):
            return _config_files(dotgit, dotgit)
        if os.path.lexists(dotgit):
            return _linked_config(here)
        if os.path.dirname(here) == here:
            return []
        here = os.path.dirname(here)


def _linked_config(top: str) -> list[str]:
    try:
        proc = subprocess.run(["git", "-C", top, "-c", "core.fsmonitor=false", "rev-parse", "--path-format=absolute",
                               "--git-dir", "--git-common-dir"], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return []
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != 2:
        return []
    return _config_files(os.path.realpath(lines[1]), os.path.realpath(lines[0]))


def _config_files(common: str, gitdir: str) -> list[str]:
    found = [os.path.join(common, "config"), os.path.join(common, "config.worktree"),
             os.path.join(gitdir, "config.worktree")]
    # a link is not followed: covering its target would cover a file elsewhere
    return [p for p in dict.fromkeys(found) if os.path.isfile(p) and not os.path.islink(p)]


def remove_created(layout: Layout) -> list[str]:
    """Delete protected paths a command created (they were absent before it ran); return them.

    A read-only bind needs an existing path, so the sandbox cannot pre-empt these; removing them
    afterwards keeps hooks and start-up files planted by a command from ever running outside.
    """
    removed = []
    # A new spelling of a protected path (`.VSCode/tasks.json`, `.lintstagedrc.json`) is the
    # protected file on another checkout: gone too, like the listed spelling.
    made = [p for p in protected_on_disk(layout.project, layout.protected_patterns)
            if p not in layout.protected_present and p not in layout.read_only]
    for path in dict.fromkeys((*layout.absent_protected, *made)):
        # Through a parent the command turned into a symlink (`ln -s ~/.config .config`), the
        # path may name a host file the command could not have written: never delete outside.
        path = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if not _within(path, layout.project) or not os.path.lexists(path):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            try:  # iterative: a command can make the tree 1,100 levels deep
                remove_tree(layout.project, os.path.relpath(path, layout.project).split(os.sep))
            except OSError:
                pass
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        removed.append(os.path.relpath(path, layout.project))
    return removed


def _parents_below(path: str, root: str) -> list[str]:
    """The directories between ``root`` (excluded) and ``path`` (excluded), outermost first."""
    parents = []
    parent = os.path.dirname(path)
    while parent != root and _within(parent, root):
        parents.append(parent)
        parent = os.path.dirname(parent)
    return parents[::-1]


def _existing(patterns: tuple[str, ...]) -> list[str]:
    found = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            found.extend(sorted(glob.glob(pattern)))
        elif os.path.exists(pattern):
            found.append(pattern)
    return found


def _toolchain(env: Mapping[str, str]) -> list[str]:
    """The directories commands are run from: PATH entries and the running Python's installation."""
    paths = [p for p in env.get("PATH", "").split(os.pathsep) if os.path.isabs(p)]
    paths += [sys.prefix, sys.base_prefix, os.path.dirname(sys.executable)]
    return [os.path.realpath(p) for p in dict.fromkeys(paths) if os.path.isdir(p)]


def _hidden_below(path: str, project: str, masked: list[str]) -> bool:
    """Whether ``path`` lies strictly inside the private /tmp or a mask (so re-binding it is safe)."""
    return not _within(path, project) and any(_within(path, m) and path != m for m in [PRIVATE_TMP, *masked])


def _visible(path: str, project: str, masked: list[str]) -> bool:
    """Whether a host path would be visible inside the sandbox (private /tmp and masks hide it)."""
    if _within(path, project):
        return True
    return not any(_within(path, m) for m in [PRIVATE_TMP, *masked])


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")

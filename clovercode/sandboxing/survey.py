"""Look at the host once per command: which protected, hidden and masked paths exist, so the pure
argv builder gets plain facts. Also the after-run guard for protected paths that did not exist."""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path
from typing import Mapping

from clovercode.ground.errors import SandboxUnavailable
from clovercode.sandboxing.argv import Layout
from clovercode.sandboxing.policy import Policy, expand_patterns, home_dirs
from clovercode.trust.paths import protected_on_disk, runs_outside_entries
from clovercode.trust.treewalk import remove_tree

PRIVATE_TMP = "/tmp"


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
    homes, shown, scrub = _home(policy, root, masked, env)
    hidden_dirs, hidden_files = [], []
    for path in _existing(expand_patterns(policy.hidden, home_dirs(env))):
        real = os.path.realpath(path)
        if _within(root, real):
            continue  # hiding it would hide the project itself
        if not _visible(real, root, masked):
            continue
        (hidden_dirs if os.path.isdir(real) else hidden_files).append(real)
    scrub += _git_config(root)
    return Layout(root, here, tuple(read_only), tuple(dict.fromkeys(pinned)), tuple(absent),
                  tuple(dict.fromkeys(hidden_dirs)), tuple(dict.fromkeys(hidden_files)), tuple(masked),
                  tuple(dict.fromkeys(exposed)), homes=homes, home_visible=shown, scrub=tuple(dict.fromkeys(scrub)),
                  protected_patterns=tuple(patterns), protected_present=tuple(present))


def _home(policy: Policy, root: str, masked: list[str], env: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...], list[str]]:
    """(homes to hide, what of them comes back read-only, git config files there to show scrubbed)."""
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
    for path in [*_toolchain(env), *_venv_bases(root, env)]:  # the home's directory that holds one: ~/.pyenv, ~/.cargo
        for home in homes:
            if _within(path, home) and path != home and not _within(path, root):
                shown.append(os.path.join(home, os.path.relpath(path, home).split(os.sep)[0]))
    shown = [p for p in dict.fromkeys(shown) if not any(_within(p, q) and p != q for q in shown)]
    scrub = [os.path.realpath(p) for p in _existing(expand_patterns(policy.home_scrubbed, tuple(homes)))
             if os.path.isfile(p)]
    return tuple(homes), tuple(shown), [p for p in scrub if any(_within(p, h) for h in homes)]


def _venv_bases(root: str, env: Mapping[str, str]) -> list[str]:
    """The interpreters the project's virtualenv (or the active one) was made from (pyvenv.cfg ``home``)."""
    found = []
    for venv in (os.path.join(root, ".venv"), os.path.join(root, "venv"), env.get("VIRTUAL_ENV", "")):
        try:
            with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as handle:
                lines = handle.read(4096).splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            key, _, value = line.partition("=")
            if key.strip() == "home" and os.path.isabs(value.strip()):
                found.append(os.path.realpath(value.strip()))
    return found


def _git_config(root: str) -> list[str]:
    """The config file of the git repository holding ``root`` (shown scrubbed: a checkout may have
    left a token header in it)."""
    here = root
    while True:
        dotgit = os.path.join(here, ".git")
        if os.path.isdir(dotgit):
            config = os.path.join(dotgit, "config")
            return [config] if os.path.isfile(config) and not os.path.islink(config) else []
        if os.path.lexists(dotgit) or os.path.dirname(here) == here:
            return []  # a worktree's or submodule's .git file: its config lies outside the project
        here = os.path.dirname(here)


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

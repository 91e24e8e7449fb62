"""Paths: does a file clovercode reads for the model lie inside the project, and which project paths
run code outside the sandbox once the run is over (CI definitions, a git hooks directory in the tree).

A repository controls its own file names, and a sandboxed command can make symlinks: ``AGENTS.md ->
~/.ssh/id_rsa`` is a file "in the project" by name only. Everything clovercode reads on the model's
behalf goes through the project view (trust/projectview.py), which resolves beneath the root;
:func:`inside_project` is its yes-or-no answer. docs/security.md, "Trust: what clovercode
reads and what it commits".
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from clovercode.trust.gitsafe import check_layout, dotgit_top, read_config
from clovercode.trust.pathident import first_covering, on_disk
from clovercode.trust.projectview import ProjectView

HUSKY_HOOKS = "_"  # husky >= 9 points core.hooksPath at .husky/_, whose scripts run .husky/<hook>
GIT_HOOKS = ("applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",  # githooks(5)
             "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge",
             "pre-push", "pre-receive", "update", "proc-receive", "post-receive", "post-update",
             "reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite", "sendemail-validate",
             "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist", "p4-post-changelist", "p4-pre-submit",
             "post-index-change")


def inside_project(root: Path, path: Path | str) -> Path | None:
    """``path`` (absolute, or relative to ``root``) resolved beneath ``root`` by the project view
    (every link followed only while it stays beneath); None when a step leaves the root."""
    try:
        return ProjectView(root).find(path)
    except (OSError, ValueError):  # the root itself is gone
        return None


# -- paths whose content runs outside the sandbox after the run ------------------------------------

@dataclass(frozen=True)
class RunsOutside:
    """Project-relative paths (posix, relative to the git work tree's top) whose content runs outside
    the sandbox later: CI definitions (with the repository's secrets) and git hooks."""

    entries: tuple[str, ...] = ()  # sandbox/protected.toml runs_outside: each a file or a directory
    hook_dirs: tuple[str, ...] = ()  # core.hooksPath (and husky's parent) when it lies inside the tree

    @property
    def all(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.entries, *self.hook_dirs)))

    def matches(self, rel: str) -> str | None:
        """The entry ``rel`` falls under (the entry itself, a path below it, or a parent replaced by a
        file or symlink that would carry it), compared by identity (trust/pathident.py: any case or
        Unicode normal form, wildcards per component); None when ``rel`` runs nothing."""
        return first_covering(rel, self.all)  # by identity: `.GitHub/Workflows` is the same on macOS

    def refused(self, rels: Iterable[str]) -> list[str]:
        """The paths among ``rels`` that fall under an entry, in order."""
        return [rel for rel in rels if self.matches(rel)]


def hook_dirs_in_tree(top: Path, hooks: Path | None) -> tuple[str, ...]:
    """``hooks`` (where git runs hooks from) relative to ``top``, when it lies inside the work tree;
    for husky's ``.husky/_`` also its parent, whose scripts ``_`` runs; for the top itself (``core.hooksPath
    = .``) the hook names there. Empty when hooks live in ``.git/hooks`` (protected with all of
    ``.git``) or outside the tree."""
    if hooks is None:
        return ()
    resolved = inside_project(top, hooks)
    if resolved is None:
        return ()
    found = resolved.relative_to(os.path.realpath(top)).as_posix()
    if found in (".", ""):
        return GIT_HOOKS  # not the whole tree: the files git would run from it
    if found == ".git" or found.startswith(".git/"):
        return ()
    out = [found]
    parent = Path(found).parent.as_posix()
    if Path(found).name == HUSKY_HOOKS and parent != ".":
        out.insert(0, parent)
    return tuple(out)


def git_layout(path: Path) -> tuple[Path, Path] | None:
    """(top of the work tree ``path`` is in, the absolute directory git runs hooks from), or None
    outside a work tree. Asked of git itself (``rev-parse --git-path hooks``), so core.hooksPath
    from any config file and its relative-path rule count exactly as for ``git commit``; rev-parse
    runs no hooks and no fsmonitor. A VcsError when the repository's own config moves the work
    tree (``core.worktree``, ``core.bare``): every guard computed from this would protect another
    directory."""
    try:
        proc = subprocess.run(["git", "-C", str(path), "-c", "core.fsmonitor=false", "rev-parse",
                               "--path-format=absolute", "--show-toplevel", "--git-path", "hooks"],
                              capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != 2 or not all(lines):
        check_layout(path, read_config(path), os.environ)  # a bare-declared tree fails here: say why
        return None
    if os.path.realpath(lines[0]) != str(dotgit_top(Path(os.path.realpath(path)))):
        check_layout(path, read_config(path), os.environ)  # the config read only when git's top is not .git's
    return Path(lines[0]), Path(lines[1])


def runs_outside(path: Path, entries: Iterable[str]) -> tuple[Path, RunsOutside]:
    """(the top of the work tree ``path`` is in, else ``path``; ``entries`` (the documented list,
    sandbox/protected.toml ``runs_outside``) plus that tree's hooks directory). All relative to the
    top: that is where CI services and git look for them."""
    entries = tuple(e.strip("/") for e in entries if e.strip("/"))
    layout = git_layout(path)
    if layout is None:
        return Path(os.path.realpath(path)), RunsOutside(entries)
    top, hooks = layout
    return top, RunsOutside(entries, hook_dirs_in_tree(top, hooks))


def runs_outside_entries(root: Path, entries: Iterable[str]) -> list[tuple[str, str]]:
    """(the work tree's top, entry) for each entry of :func:`runs_outside` that can lie inside ``root``
    (the sandbox's writable project); the others are read-only in the sandbox anyway. The survey
    finds every spelling of each on disk (trust/pathident.py :func:`on_disk`)."""
    top, found = runs_outside(root, entries)
    base = os.path.realpath(root)
    real_top = os.path.realpath(top)
    out = []
    for rel in found.all:
        path = os.path.join(real_top, rel)
        if path == base or path.startswith(base.rstrip("/") + "/"):
            out.append((real_top, rel))
    return out


def protected_on_disk(root: str, patterns: Iterable[tuple[str, str]]) -> list[str]:
    """Every existing path inside ``root`` that names one of ``patterns`` ((base, entry) pairs) on
    some checkout: `.VSCode` as well as `.vscode`, each `.lintstagedrc*`."""
    cache: dict = {}  # each directory listed once for all entries
    out = []
    for base, rel in patterns:
        out += [path for path in on_disk(base, rel, cache=cache)
                if path == root or path.startswith(root.rstrip("/") + "/")]
    return list(dict.fromkeys(out))

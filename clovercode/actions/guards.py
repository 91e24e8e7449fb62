"""What the file tools may touch beyond "inside the project": protected paths they must not write,
host secrets they must not read, and read-before-edit (a file must be viewed, unchanged since)."""

from __future__ import annotations

import fnmatch
import glob
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from clovercode.actions.toolerror import ToolError
from clovercode.trust import pathident

# A repository's config is where a checkout leaves a token (http.*.extraheader, a password in a URL);
# sandboxed commands see it scrubbed (sandboxing/scrub.py), the file tools not at all.
GIT_CONFIG_FILES = ("*/.git/config", "*/.git/config.worktree", "*/.git/worktrees/*/config.worktree",
                    "*/.git/modules/*config")


@dataclass(frozen=True)
class FileGuard:
    refused: tuple[str, ...] = ()  # protected.toml tool_refused: no slash = any component
    secrets: tuple[str, ...] = ()  # absolute glob patterns of host secrets
    runs_outside: tuple[str, ...] = ()  # absolute, resolved: CI definitions and the tree's hooks directory
    why: tuple[tuple[str, str], ...] = ()  # of those, files that make another tool run commands: (path, reason)

    @classmethod
    def from_policy_data(cls, env: Mapping[str, str] | None = None, root: Path | None = None, *,
                         allow_ci_changes: bool = False, extra: tuple[str, ...] = ()) -> "FileGuard":
        """The shipped lists; ``extra``: more hidden patterns (clovercode's own state, the user's
        sandbox_hide); with ``root``, also that project's CI definitions and hooks directory
        (sandbox/protected.toml ``runs_outside``), unless ``allow_ci_changes``."""
        from clovercode.sandboxing.policy import (expand_patterns, home_dirs, load_hidden, load_runs_commands,
                                                  load_runs_outside, load_tool_refused)

        homes = home_dirs(os.environ if env is None else env)
        outside: tuple[str, ...] = ()
        why: tuple[tuple[str, str], ...] = ()
        if root is not None and not allow_ci_changes:
            from clovercode.trust.paths import runs_outside

            top, found = runs_outside(root, load_runs_outside())
            outside = tuple(os.path.realpath(os.path.join(top, rel)) for rel in found.all)
            why = tuple((os.path.realpath(os.path.join(top, rel)), reason) for rel, reason in load_runs_commands().items())
        # stores the environment moves (KUBECONFIG, GH_CONFIG_DIR …), as written and resolved, glob-safe
        from clovercode.sandboxing.envstores import env_stores, may_hide

        project = os.path.realpath(root) if root is not None else None
        moved = [p for p in env_stores(os.environ if env is None else env, homes)
                 if may_hide(os.path.realpath(p), project)]  # one holding the project would refuse all of it
        moved = tuple(glob.escape(p) for p in dict.fromkeys([*moved, *(os.path.realpath(p) for p in moved)]))
        return cls(load_tool_refused(), (*expand_patterns((*load_hidden(), *extra), homes), *moved, *GIT_CONFIG_FILES),
                   outside, why)

    def check_read(self, path: Path, shown: str) -> None:
        if self.is_secret(path):
            raise ToolError(f"'{shown}' holds credentials or other secrets; clovercode does not read it.")

    def check_write(self, root: Path, path: Path, shown: str) -> None:
        rel = path.relative_to(root.resolve()).as_posix() if path != root.resolve() else ""
        # Compared by identity, not spelling (trust/pathident.py): `.Git/hooks` and `.VSCode/tasks.json`
        # are the protected files themselves once the change reaches a macOS or Windows checkout.
        names = [pathident.key(part) for part in rel.split("/")]
        for entry in self.refused:
            hit = (pathident.key(entry) in names) if "/" not in entry else pathident.under(rel, entry)
            if hit:
                raise ToolError(f"'{shown}' is protected ({entry}): clovercode does not change it, because it can run "
                                "code or change settings outside the sandbox. Ask the user to make this change.")
        self.check_read(path, shown)
        text = str(path)
        for entry, reason in self.why:
            if pathident.covers(text, entry):
                raise ToolError(f"'{shown}' makes another tool run commands on the user's machine ({reason}), so "
                                "clovercode does not change it. Leave it as it is and say in your summary what should "
                                "change there; the user can make the change, or allow it with `clovercode fix "
                                "--allow-ci-changes`.")
        for entry in self.runs_outside:
            if pathident.under(text, entry):
                raise ToolError(f"'{shown}' is a CI definition or git hook: it runs outside the sandbox (in CI with the "
                                "repository's secrets, or on the user's next git commit), so clovercode does not change "
                                "it. Leave it as it is and say in your summary what should change there; the user can "
                                "make the change, or allow it with `clovercode fix --allow-ci-changes`.")

    def is_secret(self, path: Path) -> bool:
        text = str(path)
        candidates = [text, *(str(p) for p in path.parents)]
        return any(fnmatch.fnmatchcase(c, pattern) for pattern in self.secrets for c in candidates)


@dataclass
class FileStamps:
    """Digests of files as the model last saw them (viewed or written), by resolved path."""

    seen: dict[Path, str] = field(default_factory=dict)

    def record(self, path: Path, digest: str) -> None:
        self.seen[path] = digest

    def forget(self, path: Path) -> None:
        self.seen.pop(path, None)

    def clear(self) -> None:
        self.seen.clear()

    def require_current(self, path: Path, shown: str, digest: str) -> None:
        """Refuse editing a file the model has not viewed, or one that changed since it did."""
        known = self.seen.get(path)
        if known is None:
            raise ToolError(f"You have not viewed {shown} yet. Call view_file on it first, then make the edit "
                            "with text copied from what you saw.")
        if known != digest:
            raise ToolError(f"{shown} changed on disk since you last viewed it (a command or the user changed it). "
                            "View it again before editing.")

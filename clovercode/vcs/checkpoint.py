"""Checkpoints of the working tree before clovercode changes it, and undo/redo.

In a git repository a checkpoint is a commit under a private ref (``refs/clovercode/...``) built
through a temporary index file: the user's index, branch, HEAD and stash are never touched, and
untracked (not ignored) files are included. Bytes are stored and restored raw (no eol or filter
conversion). Elsewhere, a content-addressed copy under the state directory does the same job
(dircheckpoint.py). Before any restore, the current state is saved too, so undo itself can be
undone (redo) and nothing the user had is lost.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol

from clovercode.ground.errors import UsageError, VcsError
from clovercode.trust import gitsafe
from clovercode.trust.projectview import ProjectView

CHECKPOINTS, UNDONE = "checkpoints", "undone"
KEEP = {CHECKPOINTS: 30, UNDONE: 10}
MAX_FILE_BYTES = 50 * 1024 * 1024  # larger files are left out of checkpoints (and never touched by undo)
_IDENTITY = {"GIT_AUTHOR_NAME": "clovercode", "GIT_AUTHOR_EMAIL": "clovercode@localhost",
             "GIT_COMMITTER_NAME": "clovercode", "GIT_COMMITTER_EMAIL": "clovercode@localhost"}


class CheckpointError(VcsError):
    """A checkpoint could not be recorded or restored."""


class NothingToUndo(UsageError):
    pass


@dataclass(frozen=True)
class Snapshot:
    kind: str  # CHECKPOINTS | UNDONE
    stamp: str  # sortable: nanoseconds since the epoch, zero-padded
    label: str

    @property
    def created(self) -> float:
        return int(self.stamp) / 1e9


class Store(Protocol):
    def save(self, kind: str, label: str) -> Snapshot: ...
    def list(self, kind: str) -> list[Snapshot]: ...  # newest first
    def same_as_now(self, snap: Snapshot) -> bool: ...
    def restore(self, snap: Snapshot) -> list[str]: ...  # project-relative paths it changed
    def drop(self, snap: Snapshot) -> None: ...


@dataclass(frozen=True)
class Restored:
    snapshot: Snapshot
    saved_as: Snapshot  # the state just before the restore
    changed: list[str]


def new_stamp() -> str:
    return f"{time.time_ns():020d}"


def open_store(root: Path, env: Mapping[str, str]) -> Store:
    root = root.resolve()
    top = _toplevel(root)
    if top is not None:
        return GitStore(root, top)
    from clovercode.ground.config import state_dir
    from clovercode.vcs.dircheckpoint import DirStore

    from clovercode.sandboxing.policy import expand_patterns, home_dirs, load_hidden

    # Run in the home, the project holds ~/.ssh and ~/.aws (and clovercode's own state): the secret
    # rules decide what is copied.
    state = state_dir(env)
    hidden = (*expand_patterns(load_hidden(), home_dirs(env)), str(state), os.path.realpath(state))
    return DirStore(root, state / "checkpoints", hidden)


def undo(root: Path, env: Mapping[str, str]) -> Restored:
    """Restore the newest checkpoint that differs from the files now."""
    return _step_back(open_store(root, env), CHECKPOINTS, UNDONE, "nothing to undo: no checkpoint differs from the current files")


def redo(root: Path, env: Mapping[str, str]) -> Restored:
    """Go back to the state the last undo replaced."""
    return _step_back(open_store(root, env), UNDONE, CHECKPOINTS, "nothing to redo: no undo to take back")


def _step_back(store: Store, source: str, safety: str, empty: str) -> Restored:
    for snap in store.list(source):
        if store.same_as_now(snap):
            store.drop(snap)  # a run that changed nothing: skip its checkpoint
            continue
        saved = store.save(safety, f"before restoring {snap.label}")
        changed = store.restore(snap)
        store.drop(snap)
        _prune(store, safety)
        return Restored(snap, saved, changed)
    raise NothingToUndo(empty)


def _prune(store: Store, kind: str) -> None:
    for old in store.list(kind)[KEEP[kind]:]:
        store.drop(old)


class Checkpointer:
    """Records one checkpoint before the first change of a run (the ToolContext.checkpoint hook)."""

    def __init__(self, root: Path, env: Mapping[str, str], label: str):
        self.root, self.env, self.label = root, env, label
        self.snapshot: Snapshot | None = None
        self.attempted = False

    def __call__(self) -> str | None:
        if self.attempted:
            return None
        self.attempted = True
        try:
            store = open_store(self.root, self.env)
            latest = store.list(CHECKPOINTS)[:1]
            if latest and store.same_as_now(latest[0]):
                self.snapshot = latest[0]  # nothing changed since the last one: undo reaches it already
            else:
                self.snapshot = store.save(CHECKPOINTS, self.label)
                _prune(store, CHECKPOINTS)
        except (CheckpointError, OSError) as exc:
            return f"Warning: no checkpoint could be recorded ({exc}); undo cannot revert this run's changes."
        return None


class GitStore:
    def __init__(self, root: Path, toplevel: Path):
        self.root, self.top = root, toplevel
        self.prefix = "" if root == toplevel else root.relative_to(toplevel).as_posix()
        scope = "root" if not self.prefix else hashlib.sha1(self.prefix.encode()).hexdigest()[:12]
        self.refs = f"refs/clovercode/{{kind}}/{scope}"
        # no hooks, fsmonitor, filters or signing programs from the repository (trust/gitsafe.py)
        self.env = {**os.environ, **gitsafe.git_env(toplevel), **_IDENTITY, "GIT_TERMINAL_PROMPT": "0"}

    def git(self, *args: str, index: str | None = None, data: bytes | None = None) -> bytes:
        env = dict(self.env)
        if index is not None:
            env["GIT_INDEX_FILE"] = index
        proc = subprocess.run(["git", "-C", str(self.top), *args], input=data, env=env,
                              capture_output=True, timeout=300)
        if proc.returncode != 0:
            raise CheckpointError(f"git {args[0]} failed: {proc.stderr.decode(errors='replace').strip()[:300]}")
        return proc.stdout

    def save(self, kind: str, label: str) -> Snapshot:
        tree = self.tree_of_worktree()
        head = subprocess.run(["git", "-C", str(self.top), "rev-parse", "--verify", "-q", "HEAD"],
                              capture_output=True, text=True, env=self.env).stdout.strip()
        subject = " ".join(label.split())[:200] or "checkpoint"
        commit = self.git("commit-tree", tree, *(["-p", head] if head else []), "-m", subject).decode().strip()
        snap = Snapshot(kind, new_stamp(), subject)
        self.git("update-ref", self._ref(snap), commit)
        return snap

    def list(self, kind: str) -> list[Snapshot]:
        base = self.refs.format(kind=kind)
        out = self.git("for-each-ref", "--format=%(refname)%00%(contents:subject)", base + "/").decode()
        snaps = [Snapshot(kind, ref.rsplit("/", 1)[1], subject) for ref, _, subject in
                 (line.partition("\0") for line in out.splitlines() if line)]
        return sorted(snaps, key=lambda s: s.stamp, reverse=True)

    def same_as_now(self, snap: Snapshot) -> bool:
        return self._tree(snap) == self.tree_of_worktree()

    def drop(self, snap: Snapshot) -> None:
        self.git("update-ref", "-d", self._ref(snap))

    def restore(self, snap: Snapshot) -> list[str]:
        target, current = self._tree(snap), self.tree_of_worktree()
        raw = self.git("diff-tree", "-r", "-z", "--no-renames", "--raw", target, current).split(b"\0")
        changed: list[str] = []
        for meta, name in zip(raw[0::2], raw[1::2]):
            if not meta:
                continue
            old_mode, _, old_sha, _, status = meta.decode().lstrip(":").split(" ")
            path = self.top / os.fsdecode(name)
            if "160000" in meta.decode():
                continue  # submodules and nested repositories are not ours to rewrite
            if status == "A":  # created after the checkpoint
                _remove(path, self.root)
            else:
                self._write_blob(path, old_sha, old_mode)
            changed.append(path.relative_to(self.root).as_posix())
        return sorted(changed)

    def diff_text(self, snap: Snapshot) -> str:
        """A unified diff from ``snap`` to the files now (the REPL's /diff)."""
        spec = self.prefix or "."
        return self.git("diff", *gitsafe.DIFF_FLAGS, "--no-color", "--no-renames", self._tree(snap),
                        self.tree_of_worktree(), "--", spec).decode("utf-8", errors="replace")

    def tree_of_worktree(self) -> str:
        """A tree object of the project's files as they are on disk (tracked + untracked, not ignored)."""
        spec = self.prefix or "."
        listed = self.git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", spec)
        entries: list[str] = []
        regular: list[tuple[str, str]] = []
        linked: dict[Path, bool] = {}  # per directory: is a symlink on its way?
        for name in dict.fromkeys(os.fsdecode(n) for n in listed.split(b"\0") if n):
            parent = (self.top / name).parent
            if linked.setdefault(parent, _through_symlink(self.top / name)):
                continue  # a tracked file whose directory became a symlink: never read outside
            try:
                info = os.lstat(self.top / name)
            except FileNotFoundError:
                continue  # tracked but deleted: absent from the snapshot
            if os.path.islink(self.top / name):
                sha = self.git("hash-object", "-w", "--no-filters", "--stdin",
                               data=os.fsencode(os.readlink(self.top / name))).decode().strip()
                entries.append(f"120000 {sha}\t{name}")
            elif os.path.isfile(self.top / name) and info.st_size <= MAX_FILE_BYTES:
                regular.append((name, "100755" if info.st_mode & 0o111 else "100644"))
        if regular:
            shas = self.git("hash-object", "-w", "--no-filters", "--stdin-paths",
                            data="".join(f"{name}\n" for name, _ in regular).encode()).decode().split()
            entries += [f"{mode} {sha}\t{name}" for (name, mode), sha in zip(regular, shas)]
        with tempfile.TemporaryDirectory(prefix="clovercode-index-") as scratch:
            index = os.path.join(scratch, "index")
            self.git("update-index", "-z", "--add", "--index-info", index=index,
                     data="".join(e + "\0" for e in entries).encode())
            return self.git("write-tree", index=index).decode().strip()

    def _tree(self, snap: Snapshot) -> str:
        return self.git("rev-parse", self._ref(snap) + "^{tree}").decode().strip()

    def _ref(self, snap: Snapshot) -> str:
        return f"{self.refs.format(kind=snap.kind)}/{snap.stamp}"

    def _write_blob(self, path: Path, sha: str, mode: str) -> None:
        data = self.git("cat-file", "blob", sha)
        _remove_blocking_dir(path, self.top)
        make_parent(path, self.top)
        if mode == "120000":
            ProjectView(self.top).symlink(os.fsdecode(data), path)
            return
        write_file_atomic(path, data, executable=mode == "100755", root=self.top)


def write_file_atomic(path: Path, data: bytes, executable: bool, root: Path | None = None) -> None:
    """Replace ``path`` (beneath ``root``, default its directory) with ``data`` through the project
    view; keeps the file's other permission bits when it exists; a link there is replaced itself."""
    view = ProjectView(root if root is not None else path.parent)
    umask = os.umask(0)
    os.umask(umask)
    try:
        info = view.stat(path) if not os.path.islink(path) else None
        mode = info.st_mode & 0o7777 if info is not None else 0o666 & ~umask
    except FileNotFoundError:
        mode = 0o666 & ~umask
    mode = mode | (0o111 & ~umask) if executable else mode & ~0o111
    view.write_bytes(path, data, mode, follow_last=False)


def make_parent(path: Path, root: Path) -> None:
    """Refuse to restore below a symlink: a command may have replaced a checkpointed directory by a
    link (out of the project, or to another of its directories). The view makes missing directories."""
    if _through_symlink(path):
        rel = path.relative_to(root).as_posix()
        raise CheckpointError(f"cannot restore {rel}: a directory on its way is now a symlink",
                              hint="Move the symlink away, then run undo again.")


def _through_symlink(path: Path) -> bool:
    parent = path.parent
    while not os.path.lexists(parent):  # the part still to be made cannot hold a link
        parent = parent.parent
    return os.path.realpath(parent) != str(parent)


def _remove(path: Path, root: Path) -> None:
    """Delete a file the checkpoint did not have, then directories that became empty."""
    view = ProjectView(root)
    try:
        if view.kind(path) != "dir" or os.path.islink(path):
            view.delete(path)
    except FileNotFoundError:
        pass
    if path.parent != root and root in path.parents:
        view.prune_empty(path.parent)  # one climb, whatever the depth


def _remove_blocking_dir(path: Path, root: Path) -> None:
    """A checkpointed file whose place is now taken by an (empty) directory."""
    if path.is_dir() and not path.is_symlink():
        try:
            ProjectView(root).rmdir(path)
        except OSError:
            raise CheckpointError(f"cannot restore {path}: a non-empty directory is in its place") from None


def _toplevel(root: Path) -> Path | None:
    try:
        proc = gitsafe.run(root, "rev-parse", "--show-toplevel", capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return Path(proc.stdout.strip()).resolve()

"""Checkpoints for projects that are not git repositories: a manifest per snapshot and
content-addressed copies of the files under the state directory, so repeated snapshots of a mostly
unchanged project cost little."""

from __future__ import annotations

import hashlib
import json
import os
import stat as statmod
import tempfile
from pathlib import Path

from clovercode.ground.privatefiles import private_dir, write_private
from clovercode.trust.projectview import ProjectView, SecretPath
from clovercode.trust.treewalk import TreeTooLarge, iter_tree
from clovercode.vcs.checkpoint import (MAX_FILE_BYTES, CheckpointError, Snapshot, make_parent, new_stamp,
                                      write_file_atomic)

MAX_TOTAL_BYTES = 1024 * 1024 * 1024
# Build outputs, caches and environments: recreated by tools, too big to copy on every run.
SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache", ".pytest_cache",
             ".tox", ".ruff_cache", "dist", "build", "target", ".clovercode"}

Entry = dict  # {"sha", "mode", "size", "mtime_ns"} for a file, {"link": target} for a symlink


class DirStore:
    def __init__(self, root: Path, base: Path, secrets: tuple[str, ...] = ()):
        self.root = root
        self.secrets = secrets  # absolute patterns of host secrets (sandbox/secrets.toml): never copied
        self.home = base / hashlib.sha256(str(root).encode()).hexdigest()[:16]
        self.objects = self.home / "objects"

    def save(self, kind: str, label: str) -> Snapshot:
        files = self.scan(store=True)
        snap = Snapshot(kind, new_stamp(), " ".join(label.split())[:200] or "checkpoint")
        path = self._manifest(snap)
        private_dir(path.parent)
        private_dir(self.home)
        manifest = {"root": str(self.root), "label": snap.label, "files": files}
        tmp = path.with_suffix(".tmp")
        write_private(tmp, json.dumps(manifest))
        os.replace(tmp, path)
        return snap

    def list(self, kind: str) -> list[Snapshot]:
        directory = self.home / kind
        if not directory.is_dir():
            return []
        snaps = []
        for path in directory.glob("*.json"):
            try:
                label = json.loads(path.read_text(encoding="utf-8")).get("label", "")
            except (OSError, ValueError):
                continue
            snaps.append(Snapshot(kind, path.stem, label))
        return sorted(snaps, key=lambda s: s.stamp, reverse=True)

    def same_as_now(self, snap: Snapshot) -> bool:
        return _comparable(self._files(snap)) == _comparable(self.scan(store=False))

    def drop(self, snap: Snapshot) -> None:
        self._manifest(snap).unlink(missing_ok=True)
        self._collect_garbage()

    def restore(self, snap: Snapshot) -> list[str]:
        target, current = self._files(snap), self.scan(store=False)
        view = ProjectView(self.root)  # every write and delete beneath the root, never through a link out
        changed = []
        for rel in sorted(set(current) - set(target)):
            view.delete(rel)
            _prune_empty(view, Path(rel).parent)
            changed.append(rel)
        for rel, entry in sorted(target.items()):
            if _comparable({rel: entry}) == _comparable({rel: current[rel]} if rel in current else {}):
                continue
            path = self.root / rel
            if path.is_dir() and not path.is_symlink():
                try:
                    view.rmdir(rel)
                except OSError:
                    raise CheckpointError(f"cannot restore {rel}: a non-empty directory is in its place") from None
            make_parent(path, self.root)
            if "link" in entry:
                view.symlink(entry["link"], rel)
            else:
                write_file_atomic(path, (self.objects / entry["sha"]).read_bytes(), bool(entry["mode"] & 0o111),
                                  root=self.root)
                view.chmod(rel, entry["mode"])
            changed.append(rel)
        return sorted(set(changed))

    def scan(self, store: bool) -> dict[str, Entry]:
        """The project's files now; with ``store``, their contents are copied into the object store."""
        previous = self._latest_files()
        files: dict[str, Entry] = {}
        total = 0
        # Contents are read beneath the root, a link never followed, and with the secret rules: run in
        # the home, ~/.ssh and ~/.aws are not copied into clovercode's state, nor a file whose content
        # is a credential or that is another name (a hard link) for a file elsewhere.
        view = ProjectView(self.root, self.secrets)
        try:
            walked = list(iter_tree(str(self.root), [], skip=frozenset(SKIP_DIRS), prune=view.secret_entry))
        except TreeTooLarge as exc:
            raise CheckpointError(f"the project holds more than {exc.limit:,} directories; no checkpoint is made",
                                  hint="Put the project under git to get checkpoints.") from None
        for parts, name, kind in walked:  # iterative: a tree 1,100 levels deep is walked like any other
            rel = "/".join([*parts, name])
            path = Path(os.path.join(self.root, rel))
            if kind == "link":
                if not os.path.isdir(path):  # a link to a directory is neither entered nor recorded (as os.walk did)
                    files[rel] = {"link": os.readlink(path)}
                continue
            try:
                info = path.lstat()
            except OSError:
                continue
            if kind != "file" or not statmod.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
                continue
            total += info.st_size
            if total > MAX_TOTAL_BYTES:
                raise CheckpointError(f"the project holds more than {MAX_TOTAL_BYTES >> 20} MiB of files; "
                                      "put it under git to get checkpoints")
            old = previous.get(rel)
            data = None
            if old and "sha" in old and (old["size"], old["mtime_ns"]) == (info.st_size, info.st_mtime_ns) \
                    and (self.objects / old["sha"]).exists():
                sha = old["sha"]
            else:
                try:
                    data = view.read_bytes(rel, MAX_FILE_BYTES)
                except SecretPath:
                    continue  # a credential by content or another name for a file elsewhere: never copied
                sha = hashlib.sha256(data).hexdigest()
            if store and not (self.objects / sha).exists():
                self._keep(view.read_bytes(rel, MAX_FILE_BYTES) if data is None else data, sha)
            files[rel] = {"sha": sha, "mode": info.st_mode & 0o7777, "size": info.st_size, "mtime_ns": info.st_mtime_ns}
        return files

    def _keep(self, data: bytes, sha: str) -> None:
        target = self.objects / sha
        if target.exists():
            return
        private_dir(self.objects)
        fd, tmp = tempfile.mkstemp(dir=self.objects)  # 0600
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)

    def _files(self, snap: Snapshot) -> dict[str, Entry]:
        try:
            return json.loads(self._manifest(snap).read_text(encoding="utf-8"))["files"]
        except (OSError, ValueError, KeyError) as exc:
            raise CheckpointError(f"checkpoint {snap.stamp} is unreadable: {exc}") from None

    def _latest_files(self) -> dict[str, Entry]:
        for kind in ("checkpoints", "undone"):
            for snap in self.list(kind)[:1]:
                return self._files(snap)
        return {}

    def _manifest(self, snap: Snapshot) -> Path:
        return self.home / snap.kind / f"{snap.stamp}.json"

    def _collect_garbage(self) -> None:
        used = set()
        for kind in ("checkpoints", "undone"):
            for snap in self.list(kind):
                used.update(e["sha"] for e in self._files(snap).values() if "sha" in e)
        if self.objects.is_dir():
            for blob in self.objects.iterdir():
                if blob.name not in used:
                    blob.unlink(missing_ok=True)


def _comparable(files: dict[str, Entry]) -> dict[str, tuple]:
    return {rel: (e.get("link"), e.get("sha"), e.get("mode")) for rel, e in files.items()}


def _prune_empty(view: ProjectView, directory: Path) -> None:
    """Remove ``directory`` (project-relative) and its parents while they are empty."""
    if directory.parts:
        view.prune_empty(directory)

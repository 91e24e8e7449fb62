"""The project view: the one place that opens, lists, walks, writes, renames or deletes a project
path on the host.

A repository names its own files and a sandboxed command can make links, so a path "in the project"
by name may lead anywhere: ``docs/notes.md -> ../../.ssh/id_rsa``, ``__pycache__ -> ~/other/__pycache__``.
Every path is resolved beneath the root the way Linux ``openat2(RESOLVE_BENEATH)`` does: one component
at a time, a link followed only while every step stays beneath the root, ``..`` never above it. The
result is then opened through a chain of directory descriptors with ``O_NOFOLLOW`` on every
component, so a link swapped in after the check is refused instead of followed. The host's secret
rules (sandbox/secrets.toml, as absolute patterns) apply to the resolved target, not the link's
name. Listings and walks leave out whatever leads outside; direct access to it raises
:class:`OutsideProject`. Callers get data (bytes, names, kinds), never a path to open themselves.
docs/security.md, "The project view".
"""

from __future__ import annotations

import errno
import os
import secrets as _secrets
import stat as statmod
import subprocess
from pathlib import Path
from typing import Iterable, Iterator

from clovercode.trust import gitsafe
from clovercode.trust.secretshape import HEAD_BYTES, looks_like_credential
from clovercode.trust.treewalk import entry_kind, iter_tree
from clovercode.trust.viewfs import (TEMP_SUFFIX, current_umask, is_link, pid_alive, relevant,  # noqa: F401 - re-exported
                                     remove_stale_temps)

MAX_LINKS = 40  # as the kernel's own limit on links in one lookup
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class OutsideProject(OSError):
    """A path that is not beneath the project root once its links are followed."""

    def __init__(self, given: str, why: str = "leads outside the project"):
        super().__init__(errno.EXDEV, why, given)


class SecretPath(OSError):
    """A path whose resolved target matches the host's secret rules, or whose content does."""

    def __init__(self, given: str, why: str = "holds credentials or other secrets"):
        super().__init__(errno.EACCES, why, given)


class ProjectView:
    """Reads and writes beneath ``root``; ``secrets``: absolute glob patterns of host secrets."""

    def __init__(self, root: Path | str, secrets: Iterable[str] = ()):
        self.given_root = os.path.abspath(os.fspath(root))
        self.root = Path(os.path.realpath(self.given_root))
        self.secrets = tuple(secrets)
        self._secret = relevant(self.secrets, str(self.root))
        self._tracked_cache: dict[str, bool] = {}

    # -- resolution ---------------------------------------------------------------------------------

    def parts(self, given: Path | str, *, follow_last: bool = True) -> list[str]:
        """The components beneath the root ``given`` resolves to (links inside followed), or
        :class:`OutsideProject`. Missing components are kept as named (a file to be created)."""
        text = os.fspath(given)
        if "\x00" in text:
            raise OutsideProject(text, "contains a NUL byte")
        todo = self._below_root(text, text)
        todo.reverse()
        done: list[str] = []
        based: list[str] = []
        base = str(self.root)
        links = 0
        while todo:
            name = todo.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if not done:
                    raise OutsideProject(text)
                done.pop()
                continue
            if not todo and not follow_last:
                done.append(name)
                break
            if len(based) != len(done):  # the joined prefix, kept as it grows: a deep path costs O(depth)
                based, base = list(done), os.path.join(self.root, *done)
            try:
                st = os.lstat(os.path.join(base, name))
            except (OSError, ValueError):
                done.append(name)  # absent (or not a directory): nothing below it can be a link
                continue
            if not statmod.S_ISLNK(st.st_mode):
                done.append(name)
                based.append(name)
                base = os.path.join(base, name)
                continue
            links += 1
            if links > MAX_LINKS:
                raise OutsideProject(text, "has too many levels of links")
            target = os.readlink(os.path.join(base, name))
            if target.startswith("/"):
                done = []  # an absolute link is followed only when it names a place beneath the root
            todo.extend(reversed(self._below_root(target, text) if target.startswith("/") else target.split("/")))
        return done

    def _below_root(self, text: str, given: str) -> list[str]:
        if not os.path.isabs(text):
            return text.split("/")
        normal = os.path.normpath(text)
        for base in dict.fromkeys((str(self.root), self.given_root)):
            if normal == base or normal.startswith(base.rstrip("/") + "/"):
                return normal[len(base):].split("/")
        raise OutsideProject(given)

    def resolve(self, given: Path | str) -> Path:
        """The absolute path beneath the root that ``given`` leads to (for identity and messages)."""
        return self.root.joinpath(*self.parts(given))

    def find(self, given: Path | str) -> Path | None:
        """:meth:`resolve`, or None when ``given`` leads outside."""
        try:
            return self.resolve(given)
        except OutsideProject:
            return None

    def rel(self, given: Path | str) -> str:
        """The resolved project-relative path (posix), '.' for the root."""
        return "/".join(self.parts(given)) or "."

    def is_secret(self, path: Path | str) -> bool:
        """Whether ``path`` (absolute, resolved) or a directory above it matches a secret pattern."""
        if self._secret is None:
            return False
        text = os.fspath(path)
        return any(self._secret.match(c) for c in (text, *(str(p) for p in Path(text).parents)))

    def secret_entry(self, parts: list[str], name: str) -> bool:
        """Whether the entry ``name`` of the directory ``parts`` matches a secret pattern itself (a walk
        checked the directories above when it entered them): one match, whatever the depth."""
        return self._secret is not None and bool(self._secret.match(os.path.join(self.root, *parts, name)))

    def kind(self, given: Path | str) -> str | None:
        """'file', 'dir' or 'other' for what ``given`` resolves to; None when it is absent or leads
        outside. Secret or not: that a file exists is no secret, its bytes are."""
        try:  # the parts hold no link as resolved: a plain lstat answers (reads still walk descriptors)
            st = os.lstat(os.path.join(self.root, *self.parts(given)))
        except (OSError, ValueError):
            return None
        if statmod.S_ISREG(st.st_mode):
            return "file"
        return "dir" if statmod.S_ISDIR(st.st_mode) else "other"

    def files_among(self, rels: Iterable[str]) -> list[str]:
        """Those of ``rels`` (project-relative, e.g. from ``git ls-files``) that are files beneath the
        root once resolved: each directory is resolved once, then one lstat per name."""
        dirs: dict[str, str | None] = {}
        out = []
        for rel in rels:
            head, _, name = rel.rpartition("/")
            if head not in dirs:
                try:
                    dirs[head] = os.path.join(self.root, *self.parts(head)) if head else str(self.root)
                except OSError:
                    dirs[head] = None
            base = dirs[head]
            if base is None or name in ("", ".", ".."):
                continue
            try:
                st = os.lstat(os.path.join(base, name))
            except (OSError, ValueError):
                continue
            if statmod.S_ISLNK(st.st_mode):
                if self.kind(rel) == "file":
                    out.append(rel)
            elif statmod.S_ISREG(st.st_mode):
                out.append(rel)
        return out

    # -- descriptors --------------------------------------------------------------------------------

    def _open_dir(self, parts: list[str], *, create: bool = False) -> int:
        """A descriptor of the directory ``parts``, reached without following any link."""
        fd = os.open(self.root, _DIR)
        try:
            for name in parts:
                if create:
                    try:
                        os.mkdir(name, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    nfd = os.open(name, _DIR, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR) and is_link(name, fd):  # swapped in after the lookup
                        raise OutsideProject(os.path.join(*parts), "became a link") from None
                    raise
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _tracked(self, parts: list[str]) -> bool:
        """Whether git tracks the file ``parts`` (a hard link git made, or one it records, is the
        project's own); asked once per file and view."""
        rel = "/".join(parts)
        if rel not in self._tracked_cache:
            try:
                proc = gitsafe.run(self.root, "ls-files", "-z", "--error-unmatch", "--", f":(literal){rel}",
                                   capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
                self._tracked_cache[rel] = proc.returncode == 0 and proc.stdout.rstrip(b"\0") == os.fsencode(rel)
            except (OSError, subprocess.SubprocessError):
                self._tracked_cache[rel] = False
        return self._tracked_cache[rel]

    def _checked(self, given: Path | str, follow_last: bool = True) -> list[str]:
        parts = self.parts(given, follow_last=follow_last)
        if self.secrets and self.is_secret(self.root.joinpath(*parts)):
            raise SecretPath(os.fspath(given))
        return parts

    # -- reading ------------------------------------------------------------------------------------

    def stat(self, given: Path | str) -> os.stat_result:
        return self._stat(self._checked(given))

    def _stat(self, parts: list[str]) -> os.stat_result:
        if not parts:
            return os.stat(self.root)
        fd = self._open_dir(parts[:-1])
        try:
            return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)

    def read_bytes(self, given: Path | str, limit: int | None = None) -> bytes:
        """The file's bytes; with ``limit``, at most ``limit + 1`` of them (the caller sees it is too big)."""
        parts = self._checked(given)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(given))
        dfd = self._open_dir(parts[:-1])
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OutsideProject(os.fspath(given), "became a link") from None
            raise
        finally:
            os.close(dfd)
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(fd)
            if statmod.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(given))
            if not statmod.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
                raise OSError(errno.EINVAL, "is not a regular file", os.fspath(given))
            # Secrets by content where names fail (trust/secretshape.py): another name for a file
            # elsewhere (a hard link git does not track), or bytes shaped like a credential.
            if st.st_nlink > 1 and not self._tracked(parts):
                raise SecretPath(os.fspath(given), "has other hard links (a second name for a file that may be a host secret)")
            head = handle.read(HEAD_BYTES)
            if looks_like_credential(head):
                raise SecretPath(os.fspath(given), "has the shape of a credential (a private key or cloud credentials)")
            if limit is not None and len(head) > limit:
                return head[:limit + 1]
            rest = handle.read() if limit is None else handle.read(limit + 1 - len(head))
            return head + rest

    def read_text(self, given: Path | str, limit: int | None = None) -> str:
        return self.read_bytes(given, limit).decode("utf-8", errors="replace")

    def listdir(self, given: Path | str = ".", *, outside: bool = False) -> list[tuple[str, str]]:
        """(name, kind) of each entry of a directory, sorted; entries leading outside (or secret) left
        out, or with ``outside`` listed as kind 'outside' (for a note to the person). A link inside the
        project is listed as what it leads to."""
        parts = self._checked(given)
        fd = self._open_dir(parts)
        try:
            with os.scandir(fd) as found:
                entries = sorted(((e.name, entry_kind(e)) for e in found), key=lambda e: e[0])
        finally:
            os.close(fd)
        out = []
        for name, kind in entries:
            if kind == "link":
                rel = "/".join([*parts, name])
                kind = self.kind(rel)
                if kind is None:  # leads outside, or dangling
                    if outside and self.find(rel) is None:
                        out.append((name, "outside"))
                    continue
                if self.secrets and self.is_secret(self.resolve(rel)):
                    continue
            elif self.secrets and self.is_secret(self.root.joinpath(*parts, name)):
                continue
            out.append((name, kind))
        return out

    def walk(self, given: Path | str = ".", skip_dirs: Iterable[str] = (), max_dirs: int | None = None) -> Iterator[str]:
        """Project-relative paths of the files below ``given``, depth first, sorted per directory, at
        any depth (trust/treewalk.py: no recursion). Directory links are not descended (a loop, or
        another view of the same files); links to files are given when they stay inside;
        ``skip_dirs``: directory names not entered; ``max_dirs``: the walk ends quietly after that
        many directories, and without it past treewalk.MAX_DIRS with :class:`TreeTooLarge`."""
        try:
            start = self._checked(given)
        except OSError:
            return
        prune = self.secret_entry

        for parts, name, kind in iter_tree(str(self.root), start, skip=frozenset(skip_dirs), max_dirs=max_dirs,
                                           quiet=max_dirs is not None, prune=prune):
            rel = "/".join([*parts, name])
            if kind == "file":
                yield rel
            elif kind == "link":  # followed only to a file beneath the root; a directory link is not entered
                if self.kind(rel) == "file" and not self.is_secret(self.resolve(rel)):
                    yield rel

    # -- writing ------------------------------------------------------------------------------------

    def write_bytes(self, given: Path | str, data: bytes, mode: int | None = None, *, follow_last: bool = True) -> None:
        """Replace the file atomically (a temp file in the same directory renamed over it): a crash
        leaves the old file or the new one. Keeps the file's mode (or takes ``mode``) and, when it
        can, its owner. Missing directories are made. ``follow_last=False``: a link in the file's
        place is replaced itself (a checkpoint's restore), never written through."""
        parts = self._checked(given, follow_last)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(given))
        name = parts[-1]
        dfd = self._open_dir(parts[:-1], create=True)
        try:
            try:
                info: os.stat_result | None = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                info = None
            if info is not None and statmod.S_ISLNK(info.st_mode) and not follow_last:
                info = None  # the link goes; the new file gets a new file's mode
            if info is not None and not statmod.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "is not a regular file", os.fspath(given))
            remove_stale_temps(dfd, name)
            # The pid in the name lets a later write tell a dead writer's leftover from a live one's file.
            tmp = f".{name}.{os.getpid()}.{_secrets.token_hex(3)}.{TEMP_SUFFIX.lstrip('.')}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                    if mode is None:
                        mode = info.st_mode & 0o7777 if info else 0o666 & ~current_umask()
                    os.fchmod(handle.fileno(), mode)
                    if info is not None and (info.st_uid, info.st_gid) != (os.geteuid(), os.getegid()):
                        try:
                            os.fchown(handle.fileno(), info.st_uid, info.st_gid)
                        except PermissionError:
                            pass  # not ours to give away: the file becomes ours, as any editor's save would
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except FileNotFoundError:
                    pass
                raise
        finally:
            os.close(dfd)

    def delete(self, given: Path | str) -> None:
        """Remove a file (a link inside the project: the link itself)."""
        parts = self._checked(given, follow_last=False)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(given))
        dfd = self._open_dir(parts[:-1])
        try:
            os.unlink(parts[-1], dir_fd=dfd)
        finally:
            os.close(dfd)

    def chmod(self, given: Path | str, mode: int) -> None:
        parts = self._checked(given)
        if not parts:
            raise OSError(errno.EPERM, "is the project root", os.fspath(given))
        dfd = self._open_dir(parts[:-1])
        try:
            if is_link(parts[-1], dfd):
                raise OutsideProject(os.fspath(given), "became a link")
            os.chmod(parts[-1], mode, dir_fd=dfd)
        finally:
            os.close(dfd)

    def rmdir(self, given: Path | str) -> None:
        """Remove an empty directory (never a link's target)."""
        parts = self.parts(given, follow_last=False)
        if not parts:
            raise OSError(errno.EBUSY, "is the project root", os.fspath(given))
        dfd = self._open_dir(parts[:-1])
        try:
            os.rmdir(parts[-1], dir_fd=dfd)
        finally:
            os.close(dfd)

    def prune_empty(self, given: Path | str) -> None:
        """Remove the directory ``given`` and then each directory above it while it is empty, never
        the root: one descent and one climb, so a directory 1,100 levels deep costs O(depth) opens."""
        parts = self.parts(given, follow_last=False)
        idents = []
        fd = os.open(self.root, _DIR)
        try:
            for name in parts:  # no link followed on the way down; each level's identity kept
                idents.append(os.fstat(fd))
                nfd = os.open(name, _DIR, dir_fd=fd)
                os.close(fd)
                fd = nfd
        except OSError:
            return
        finally:
            os.close(fd)
        rfd = os.open(self.root, _DIR)
        try:
            for depth in range(len(parts), 0, -1):
                above = parts[:depth - 1]
                try:
                    pfd = os.open("/".join(above), _DIR, dir_fd=rfd) if above else os.dup(rfd)
                except OSError:
                    return
                try:
                    info = os.fstat(pfd)
                    if (info.st_dev, info.st_ino) != (idents[depth - 1].st_dev, idents[depth - 1].st_ino):
                        return  # a directory on the way became a link meanwhile
                    os.rmdir(parts[depth - 1], dir_fd=pfd)
                except OSError:
                    return
                finally:
                    os.close(pfd)
        finally:
            os.close(rfd)

    def symlink(self, target: str, given: Path | str) -> None:
        """Make ``given`` a link to ``target`` (replacing a file or link there): a checkpoint's link
        restored as it was. What it leads to is the view's business only when someone follows it."""
        parts = self.parts(given, follow_last=False)
        if not parts:
            raise OSError(errno.EEXIST, "is the project root", os.fspath(given))
        dfd = self._open_dir(parts[:-1], create=True)
        try:
            try:
                os.unlink(parts[-1], dir_fd=dfd)
            except FileNotFoundError:
                pass
            os.symlink(target, parts[-1], dir_fd=dfd)
        finally:
            os.close(dfd)

    def rename(self, source: Path | str, target: Path | str) -> None:
        src, dst = self._checked(source, follow_last=False), self._checked(target, follow_last=False)
        if not src or not dst:
            raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(source))
        sfd = self._open_dir(src[:-1])
        try:
            tfd = self._open_dir(dst[:-1], create=True)
            try:
                os.replace(src[-1], dst[-1], src_dir_fd=sfd, dst_dir_fd=tfd)
            finally:
                os.close(tfd)
        finally:
            os.close(sfd)

"""The git side of ``clovercode fix`` (GitPython): a clean start, one commit on a fix branch, a push.

The user's uncommitted work is never touched: a checkout with changes to tracked files is refused
before the model runs, and files that were untracked before the run are never committed. What is
committed is the change set (vcs/changeset.py): the whole working tree's difference from the start.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from clovercode.ground.errors import UsageError, VcsError
from clovercode.trust import gitsafe
from clovercode.vcs.changeset import ChangeSet, change_set, untracked_stamps

if TYPE_CHECKING:  # GitPython is imported only when a command needs git
    from git import Repo

NO_PROMPT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never"}  # CI must fail, not hang on a prompt
DEFAULT_AUTHOR = ("clovercode", "clovercode@users.noreply.github.com")


@dataclass(frozen=True)
class Start:
    """Where a fix starts: the commit it is based on and what was there before the model ran."""

    base: str  # full sha of HEAD
    branch: str | None  # the checked-out branch, None when HEAD is detached
    untracked: frozenset[str]  # top-relative paths; never committed by clovercode
    stamps: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)  # the untracked files' (mode, size, mtime)


@dataclass(frozen=True)
class FileStat:
    path: str
    added: int | None  # None for binary files
    removed: int | None


class Checkout:
    """A git working tree that holds the project root."""

    def __init__(self, repo: "Repo", root: Path):
        # before anything is read from where git says the tree is: a repository's core.worktree moves it
        gitsafe.check_layout(root, gitsafe.read_config(root), os.environ)
        self.repo = repo
        self.top = Path(repo.working_tree_dir or root).resolve()
        self.root = root.resolve()
        # the repository's config names no program git runs for us (trust/gitsafe.py), also in
        # the git processes GitPython starts itself (status, cat-file)
        self.config = gitsafe.read_config(self.top)
        repo.git.update_environment(**gitsafe.safe_env(self.config, os.environ))

    # -- reading --------------------------------------------------------------------------------
    def start(self) -> Start:
        """The starting point; raises VcsError if HEAD has no commit or tracked files have changes."""
        try:
            base = self.repo.head.commit.hexsha
        except ValueError:
            raise VcsError("the repository has no commit yet, so there is nothing to branch from",
                           hint="Commit the project first (git add -A && git commit -m 'initial').") from None
        dirty = self.tracked_changes()
        if dirty:
            shown = ", ".join(dirty[:8]) + (f" and {len(dirty) - 8} more" if len(dirty) > 8 else "")
            raise VcsError(f"the working tree has uncommitted changes to tracked files: {shown}",
                           hint="clovercode fix never touches uncommitted work. Commit or stash it first "
                                "(git stash), or pass --no-commit to let the model edit the working tree as it is.")
        branch = None if self.repo.head.is_detached else self.repo.active_branch.name
        untracked = frozenset(self.repo.untracked_files)
        return Start(base, branch, untracked, untracked_stamps(self.top, untracked))

    def tracked_changes(self) -> list[str]:
        """Tracked files that differ from HEAD, in the index or the working tree."""
        out = self._git("diff", *gitsafe.DIFF_FLAGS, "--name-only", "--no-renames", "-z", "HEAD")
        return [p for p in out.split("\0") if p]

    def local_branches(self) -> list[str]:
        return [head.name for head in self.repo.heads]

    def remote_url(self, remote: str) -> str:
        """Where fetches and pushes for ``remote`` go: its first configured URL, never rewritten by the
        repository's ``insteadOf``/``pushInsteadOf``/``pushurl`` (trust/gitsafe.py)."""
        url = gitsafe.remote_url(self.config, remote)
        if url is None:
            known = ", ".join(r.name for r in self.repo.remotes) or "none"
            raise UsageError(f"git remote '{remote}' does not exist (remotes: {known})",
                             hint="Pass --remote NAME, or add one: git remote add origin URL.")
        return url

    def remote_heads(self, remote: str, *patterns: str) -> dict[str, str]:
        """Branch name -> sha for the branches matching the glob ``patterns`` where pushes to ``remote`` go."""
        refs = [f"refs/heads/{p}" for p in patterns or ("*",)]
        out = self._network("ls-remote", self.remote_url(remote), ("--heads",), refs)
        heads = {}
        for line in out.splitlines():
            sha, _, ref = line.partition("\t")
            if ref.startswith("refs/heads/"):
                heads[ref[len("refs/heads/"):]] = sha
        return heads

    def credentials_note(self) -> str | None:
        """One warning when .git/config holds credentials a checkout left there (their keys, never values)."""
        keys = gitsafe.persisted_credentials(self.config)
        if not keys:
            return None
        return (f"the repository's .git/config holds credentials ({', '.join(keys)}): clovercode's git does not send "
                "them, sandboxed commands and the file tools do not see them; remove them (git config --local "
                "--unset-all KEY), or check out with persist-credentials: false and set fix.push_token")

    def identity(self) -> tuple[str, str] | None:
        """git's configured user.name / user.email, if both are set."""
        reader = self.repo.config_reader()
        name = reader.get_value("user", "name", default="")
        email = reader.get_value("user", "email", default="")
        return (str(name), str(email)) if name and email else None

    def untracked(self) -> frozenset[str]:
        """Untracked files git does not ignore, top-relative."""
        return frozenset(self.repo.untracked_files)

    def changes(self, start: Start, written: Iterable[str] = (), by_tests: Iterable[str] = (),
                ignored_written: Iterable[str] = ()) -> ChangeSet:
        """The working tree's change since ``start`` (vcs/changeset.py); ``written`` are root-relative
        paths the file tools wrote, ``ignored_written`` top-relative ignored paths a command changed
        (vcs/ignoredstat.py), so that those git ignores are named as left out."""
        tops = list(ignored_written)
        for rel in written:
            try:
                tops.append((self.root / rel).resolve().relative_to(self.top).as_posix())
            except (ValueError, OSError):
                continue
        return change_set(self, start, tops, by_tests)

    def diff_stat(self, base: str, commit: str) -> list[FileStat]:
        out = self._git("diff", *gitsafe.DIFF_FLAGS, "--numstat", "--no-renames", "-z", base, commit)
        stats = []
        for record in out.split("\0"):
            if not record.strip():
                continue
            added, removed, path = record.split("\t", 2)
            stats.append(FileStat(path, None if added == "-" else int(added), None if removed == "-" else int(removed)))
        return stats

    def diff_stat_text(self, base: str, commit: str) -> str:
        return self._git("diff", *gitsafe.DIFF_FLAGS, "--stat", "--no-renames", base, commit)

    def commits_between(self, base: str, tip: str) -> int:
        return int(self._git("rev-list", "--count", f"{base}..{tip}").strip())

    # -- writing --------------------------------------------------------------------------------
    def commit_on_branch(self, start: Start, branch: str, changes: ChangeSet, message: str,
                         author: tuple[str, str], committer: tuple[str, str],
                         expected: str | None = None) -> tuple[str, str | None]:
        """Point ``branch`` at the base, carry the working-tree changes onto it and commit exactly ``changes``.

        ``expected`` is the branch's tip when the run was planned (None: it did not exist); if it
        moved since, nothing is done. An existing branch is kept under a backup ref first (returned
        with the new commit's sha). The commit carries the trailer that marks it as clovercode's
        (vcs/branchguard.py). The checkout stays on ``branch`` afterwards, so the person sees the
        fix in their tree. Hooks are not run (like ``git commit --no-verify``; nor post-checkout,
        nor pre-push on the push): they are the repository's code, run outside the sandbox on
        files the model wrote.
        """
        from clovercode.vcs.branchguard import backup_ref

        current = self.unmoved(start, branch, expected, "The model's changes are still in the working tree.")
        backup = backup_ref(self, branch, current) if current else None
        # compare-and-swap: a branch that moved in the meantime is refused, never overwritten
        self._git("update-ref", f"refs/heads/{branch}", start.base, current or "")
        try:
            self._git("checkout", "-q", branch)
        except VcsError:  # e.g. checked out in another worktree: put the branch back as it was
            if current:
                self._git("update-ref", f"refs/heads/{branch}", current, start.base)
            else:
                self._git("update-ref", "-d", f"refs/heads/{branch}", start.base)
            raise
        return self.commit_tree(start.base, changes.tree, message, author, committer), backup

    def commit_tree(self, parent: str, tree: str, message: str, author: tuple[str, str],
                    committer: tuple[str, str]) -> str:
        """Commit ``tree`` on ``parent`` where HEAD points (no hooks); the index then holds ``tree``, so
        ``git status`` shows only what was left out."""
        from git import Actor

        from clovercode.vcs.branchguard import with_trailer

        self._git("read-tree", tree)
        commit = self.repo.index.commit(with_trailer(message, tree), parent_commits=[self.repo.commit(parent)],
                                        author=Actor(*author), committer=Actor(*committer), skip_hooks=True)
        if commit.tree.hexsha != tree:  # the index was changed under us: never commit another tree
            raise VcsError(f"the commit's tree {commit.tree.hexsha[:12]} is not the tested tree {tree[:12]}")
        self._run("update-index", "-q", "--refresh", capture_output=True)
        return commit.hexsha

    def unmoved(self, start: "Start", branch: str, expected: str | None, where: str) -> str | None:
        """The branch's tip, after checking that neither HEAD nor ``branch`` moved during the run
        (``where``: where the run's work is, for the refusal's hint)."""
        if self.repo.head.commit.hexsha != start.base:
            raise VcsError(f"HEAD moved during the run (it was {start.base[:12]}); nothing was committed", hint=where)
        current = self.branch_tip(branch)
        if current != expected:
            raise VcsError(f"the branch {branch} changed during the run; nothing was committed",
                           hint=f"{where} Look at the branch, then run again.")
        return current

    def branch_tip(self, branch: str) -> str | None:
        """The sha the local ``branch`` points at, None when there is no such branch."""
        return self.resolve(f"refs/heads/{branch}")

    def resolve(self, ref: str) -> str | None:
        proc = self._run("rev-parse", "-q", "--verify", f"{ref}^{{commit}}", capture_output=True, text=True)
        return (proc.stdout.strip() or None) if proc.returncode == 0 else None

    def ref_exists(self, ref: str) -> bool:
        return self._run("show-ref", "-q", "--verify", ref).returncode == 0

    def fetch_branch(self, remote: str, branch: str, into: str, env: Mapping[str, str] | None = None) -> str | None:
        """Fetch ``branch`` from where pushes to ``remote`` go into the local ref ``into`` (only the tip
        in a shallow clone)."""
        shallow = self._git("rev-parse", "--is-shallow-repository").strip() == "true"
        # the detached git directory has no refs: what is here already is named, so only new objects come
        tips = list(dict.fromkeys(self._git("for-each-ref", "--format=%(objectname)", "--count=64",
                                            "refs/heads", "refs/remotes").split()))
        options = ["-q", "--no-tags", "--no-write-fetch-head", *(["--depth=1"] if shallow else []),
                   *(f"--negotiation-tip={tip}" for tip in tips)]
        sha = self._network("fetch", self.remote_url(remote), options, [f"+refs/heads/{branch}:{into}"], env=env,
                            then=("rev-parse", "-q", "--verify", into)).strip()
        if sha:
            self._git("update-ref", into, sha)
        return self.resolve(into)

    def delete_ref(self, ref: str) -> None:
        self._git("update-ref", "-d", ref)

    def git(self, *args: str) -> str:
        """Run a git command in this checkout (no hooks); a VcsError when it fails."""
        return self._git(*args)

    def push(self, remote: str, branch: str, expected: str | None, env: Mapping[str, str] | None = None) -> None:
        """Push ``branch``, replacing the remote's copy only if it is still ``expected`` (None: must not exist).
        ``env`` adds to git's environment (e.g. credentials from :func:`push_auth_env`)."""
        lease = f"--force-with-lease=refs/heads/{branch}:{expected or ''}"
        self._push(remote, branch, [lease], env)

    def push_fast_forward(self, remote: str, branch: str, env: Mapping[str, str] | None = None) -> None:
        """Push ``branch`` with no force of any kind: the remote takes it only as a fast-forward."""
        self._push(remote, branch, [], env)

    def _push(self, remote: str, branch: str, options: list[str], env: Mapping[str, str] | None) -> None:
        tip = self.branch_tip(branch)
        if tip is None:
            raise VcsError(f"there is no local branch {branch} to push")
        self._network("push", self.remote_url(remote), ["--porcelain", *options], [f"{tip}:refs/heads/{branch}"],
                      env=env)
        # The push ran detached from this repository, so git did not move the remote-tracking ref as a
        # plain `git push` does; users (and `git status`) expect origin/BRANCH to show what was pushed.
        self._run("update-ref", f"refs/remotes/{remote}/{branch}", tip, capture_output=True)

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self._run("merge-base", "--is-ancestor", older, newer).returncode == 0

    def push_url(self, remote: str) -> str:
        """Where pushes to ``remote`` really go: :meth:`remote_url` (kept for the callers' wording)."""
        return self.remote_url(remote)

    # -- plumbing -------------------------------------------------------------------------------
    def git_env(self, env: Mapping[str, str], *args: str) -> str:
        """A git command with ``env`` added (a private index, literal pathspecs); VcsError when it fails."""
        return self._git(*args, env=env)

    def refresh(self, env: Mapping[str, str]) -> None:
        """Bring the index's stat data up to date (exit 1 only says some files differ)."""
        self._run("update-index", "-q", "--refresh", env_extra=env, capture_output=True)

    def ignored(self, paths: list[str]) -> set[str]:
        if not paths:
            return set()
        # check-ignore exits 1 when nothing is ignored: not an error here. -z needs --stdin.
        proc = self._run("check-ignore", "--no-index", "-z", "--stdin", input="\0".join(paths).encode(),
                         capture_output=True)
        return {p for p in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if p}

    def _run(self, *args: str, env_extra: Mapping[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
        """A git command whose exit status the caller reads (not an error)."""
        env = {**os.environ, **(env_extra or {}), **gitsafe.safe_env(self.config, os.environ)}
        return subprocess.run(["git", "-C", str(self.top), *args], env=env, **kwargs)

    def _network(self, command: str, url: str, options: Iterable[str], rest: Iterable[str],
                 env: Mapping[str, str] | None = None, then: tuple[str, ...] = ()) -> str:
        """``git COMMAND OPTIONS -- URL REST`` where the repository's config cannot reach it (trust/gitsafe.py);
        ``env``'s ``GIT_CONFIG_*`` (credentials) come last so no override resets them. ``then`` is a
        command run in the same detached directory afterwards (its output is returned instead)."""
        with gitsafe.detached(self.top) as base:
            full = {**base, **NO_PROMPT_ENV, **{k: v for k, v in (env or {}).items() if not k.startswith("GIT_CONFIG_")}}
            full.update(gitsafe.config_env(gitsafe.config_pairs(env or {}), full))
            argv = ["git", command, *gitsafe.transport_flags(url, command), *options, "--", url, *rest]
            proc = subprocess.run(argv, env=full, cwd=base["GIT_CEILING_DIRECTORIES"], capture_output=True,
                                  stdin=subprocess.DEVNULL, timeout=600)
            if proc.returncode != 0:
                detail = proc.stderr.decode("utf-8", "replace").strip()
                # push --porcelain tells why a ref was refused on stdout: "!<TAB>src:dst<TAB>[rejected] (stale info)"
                refused = [line.split("\t")[-1] for line in proc.stdout.decode("utf-8", "replace").splitlines()
                           if line.startswith("!")]
                if refused:
                    detail += " (" + "; ".join(refused) + ")"
                raise VcsError(f"git {command} failed: {detail}")
            if then:
                proc = subprocess.run(["git", *then], env=full, cwd=base["GIT_CEILING_DIRECTORIES"],
                                      capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
            return proc.stdout.decode("utf-8", "surrogateescape")

    def _git(self, *args: str, network: bool = False, env: Mapping[str, str] | None = None) -> str:
        from git import GitCommandError

        extra = {**(NO_PROMPT_ENV if network else {}), **(env or {})}
        # credentials given through GIT_CONFIG_* (github/refs.py) come first, then the safe overrides
        extra.update(gitsafe.safe_env(self.config, {**os.environ, **extra}))
        try:
            return self.repo.git.execute(["git", *args], env=extra, strip_newline_in_stdout=False)
        except GitCommandError as exc:
            detail = _captured(exc.stderr, "stderr") or str(exc)
            # push --porcelain tells why a ref was refused on stdout: "!<TAB>src:dst<TAB>[rejected] (stale info)"
            refused = [line.split("\t")[-1] for line in _captured(exc.stdout, "stdout").splitlines() if line.startswith("!")]
            if refused:
                detail += " (" + "; ".join(refused) + ")"
            raise VcsError(f"git {args[0]} failed: {detail}") from None


def _captured(text: object, label: str) -> str:
    """GitPython's ``"\n  stderr: '...'"`` rendering of captured output, back to the plain text."""
    value = str(text or "").strip()
    value = value.removeprefix(f"{label}:").strip()
    if len(value) >= 2 and value[0] == value[-1] == "'":
        value = value[1:-1]
    return value.strip()


def toplevel(path: Path) -> Path | None:
    """The top of the git working tree holding ``path``; None outside one (or when git cannot tell)."""
    try:
        proc = gitsafe.run(path, "rev-parse", "--show-toplevel", capture_output=True, text=True)
    except OSError:  # git is not installed: nothing can be a repository
        return None
    top = proc.stdout.strip()
    return Path(top).resolve() if proc.returncode == 0 and top else None


def open_checkout(root: Path) -> Checkout | None:
    """The git working tree holding ``root``, or None if ``root`` is not inside one."""
    try:
        from git import InvalidGitRepositoryError, NoSuchPathError, Repo
        from git.exc import GitCommandNotFound
    except ImportError as exc:  # pragma: no cover - GitPython imports fine wherever git is installed
        raise VcsError(f"git is not usable: {exc}", hint="Install git (e.g. apt-get install git).") from None
    try:
        return Checkout(Repo(root, search_parent_directories=True), root)
    except (InvalidGitRepositoryError, NoSuchPathError):
        return None
    except GitCommandNotFound:  # pragma: no cover
        raise VcsError("git is not installed", hint="Install git (e.g. apt-get install git).") from None


def parse_author(text: str, source: str = "--author") -> tuple[str, str]:
    """'Name <email>' -> (name, email); a UsageError naming ``source`` otherwise."""
    match = re.fullmatch(r"\s*([^<>]*?)\s*<([^<>\s]+@[^<>\s]+)>\s*", text)
    if not match or not match.group(1):
        raise UsageError(f"{source}: expected 'Name <email>', got {text!r}")
    return match.group(1), match.group(2)

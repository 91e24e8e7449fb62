"""Which files the repository map reads: the project's files (git's view), in a known language, outside
vendored, generated and build-output trees, and not huge. Binary, minified and generated contents are
caught when parsed.

Listing and stat work on plain strings: on a monorepo of tens of thousands of files, ``Path`` objects
and their ``parents`` cost more than git itself."""

from __future__ import annotations

import os
import stat as statmod
import subprocess
from dataclasses import dataclass
from pathlib import Path

from clovercode.actions.listing import SKIP_DIRS
from clovercode.context.grammars import language_for
from clovercode.trust import gitsafe
from clovercode.trust.projectview import ProjectView

# Directories whose code the project did not write by hand: vendored copies, package managers' trees,
# generated code and build output (a committed `dist/` holds cjs/esm copies and `.d.ts` duplicates of
# the sources). Checked on every path component, so `lib/vendor/x.js` is left out too.
VENDORED_DIRS = frozenset({
    "vendor", "vendors", "vendored", "_vendor", "third_party", "third-party", "thirdparty", "3rdparty",
    "node_modules", "bower_components", "jspm_packages", "site-packages", "dist-packages", "Pods", "Carthage",
    "generated", "__generated__", "gen-src", ".next", ".nuxt", ".svelte-kit", "coverage", ".cache",
    ".eggs", "__pypackages__", ".gradle",
    "dist", "build", "_build", "out-tsc",
})
GENERATED_SUFFIXES = (".min.js", ".min.mjs", ".min.cjs", ".bundle.js", ".chunk.js", ".pb.go", "_pb2.py",
                      "_pb2_grpc.py", ".pb.h", ".pb.cc", ".generated.ts", ".generated.js", ".d.ts.map", ".g.dart")
# None of these are in a language the map reads today; listed so a grammar added later keeps them out.
LOCKFILES = frozenset({"package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "bun.lockb",
                       "Cargo.lock", "poetry.lock", "Pipfile.lock", "uv.lock", "go.sum", "composer.lock",
                       "Gemfile.lock", "gradle.lockfile", "flake.lock"})
GENERATED_ATTRIBUTES = ("linguist-generated", "linguist-vendored")
WALK_SKIP = frozenset(SKIP_DIRS | VENDORED_DIRS)


@dataclass(frozen=True)
class SourceFile:
    rel: str  # project-relative, with forward slashes
    full: str  # absolute path (a string: a Path per file costs more than the stat on a large tree)
    language: str
    mtime_ns: int
    size: int
    inode: int = 0

    @property
    def path(self) -> Path:
        return Path(self.full)

    @property
    def key(self) -> tuple[int, int, int]:
        """What says the file is unchanged without reading it (a rename or a copy changes the inode)."""
        return self.mtime_ns, self.size, self.inode


@dataclass
class Selection:
    files: list[SourceFile]
    too_large: list[str]  # skipped for size, so the map can say so
    left_out: int = 0  # generated, vendored or build output (by path or .gitattributes)


def select_files(root: Path, max_bytes: int, include_generated: bool = False) -> Selection:
    """The files of ``root`` worth parsing, with the stat data the tag cache is keyed by, sorted by path.

    ``include_generated`` keeps vendored, generated and build-output files (by path and by
    ``.gitattributes``) in the map."""
    root = root.resolve()
    view = ProjectView(root)
    base = str(root) + os.sep
    listed = _git_files(root)
    in_git = listed is not None
    if listed is None:
        listed = _walk(root, frozenset(SKIP_DIRS) if include_generated else WALK_SKIP)
    candidates: list[tuple[str, str]] = []
    left_out = 0
    has_attributes = False
    for rel in listed:
        slash = rel.rfind("/")
        name = rel[slash + 1:]
        if name == ".gitattributes":
            has_attributes = True
        language = language_for(name)
        if language is None:
            continue
        if not include_generated and (name in LOCKFILES or name.endswith(GENERATED_SUFFIXES)
                                      or (slash > 0 and not VENDORED_DIRS.isdisjoint(rel[:slash].split("/")))):
            left_out += 1
            continue
        candidates.append((rel, language))
    if in_git and has_attributes and not include_generated and candidates:
        marked = _marked_generated(root, [rel for rel, _ in candidates])
        if marked:
            left_out += len(marked)
            candidates = [c for c in candidates if c[0] not in marked]
    files: list[SourceFile] = []
    too_large: list[str] = []
    for rel, language in candidates:
        full = base + rel if os.sep == "/" else base + rel.replace("/", os.sep)
        try:
            st = os.lstat(full)
            if statmod.S_ISLNK(st.st_mode):
                if view.find(rel) is None:
                    continue  # a link out of the project (~/.aws/credentials.py): never parsed into the map
                st = view.stat(rel)
        except OSError:
            continue  # vanished or unreadable since it was listed
        if not statmod.S_ISREG(st.st_mode):
            continue  # a symlink to a directory, a socket…
        if st.st_size > max_bytes:
            too_large.append(rel)
            continue
        files.append(SourceFile(rel, full, language, st.st_mtime_ns, st.st_size, st.st_ino))
    files.sort(key=lambda f: f.rel)
    too_large.sort()
    return Selection(files, too_large, left_out)


def _git_files(root: Path) -> list[str] | None:
    """Tracked files plus untracked ones .gitignore does not ignore, relative to ``root``; None outside git."""
    try:
        out = gitsafe.run(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                          capture_output=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    # --cached lists a file with a merge conflict once per stage: dict.fromkeys drops the repeats.
    return list(dict.fromkeys(name for name in out.decode("utf-8", errors="surrogateescape").split("\0") if name))


def _walk(root: Path, skip_dirs: frozenset[str]) -> list[str]:
    return list(ProjectView(root).walk(".", skip_dirs))  # links out of the project are never entered


def _marked_generated(root: Path, rels: list[str]) -> set[str]:
    """Files ``.gitattributes`` marks ``linguist-generated`` or ``linguist-vendored`` (GitHub's convention)."""
    try:
        out = gitsafe.run(root, "check-attr", "-z", "--stdin", *GENERATED_ATTRIBUTES,
                          input="".join(f"{rel}\0" for rel in rels).encode("utf-8", errors="surrogateescape"),
                          capture_output=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    fields = out.decode("utf-8", errors="surrogateescape").split("\0")
    marked = set()
    for i in range(0, len(fields) - 2, 3):  # path, attribute, value
        if fields[i + 2] in ("set", "true"):
            marked.add(fields[i])
    return marked

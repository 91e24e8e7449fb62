"""Which files the repository map reads: the project's files (git's view), in a known language, outside
vendored and generated trees, and not huge. Binary and generated contents are caught when parsed."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from clovercode.actions.listing import SKIP_DIRS, project_files
from clovercode.context.grammars import language_for

# Directories whose code the project did not write (or writes by machine). Checked on every path
# component, so `lib/vendor/x.js` is skipped too.
VENDORED_DIRS = frozenset({
    "vendor", "vendors", "vendored", "_vendor", "third_party", "third-party", "thirdparty", "3rdparty",
    "node_modules", "bower_components", "jspm_packages", "site-packages", "dist-packages", "Pods", "Carthage",
    "generated", "__generated__", "gen-src", ".next", ".nuxt", ".svelte-kit", "coverage", ".cache",
    ".eggs", "__pypackages__", ".gradle",
})
GENERATED_SUFFIXES = (".min.js", ".min.mjs", ".bundle.js", ".pb.go", "_pb2.py", "_pb2_grpc.py", ".pb.h",
                      ".pb.cc", ".generated.ts", ".generated.js", ".d.ts.map")
WALK_SKIP = frozenset(SKIP_DIRS | VENDORED_DIRS)


@dataclass(frozen=True)
class SourceFile:
    rel: str  # project-relative, with forward slashes
    path: Path
    language: str
    mtime_ns: int
    size: int


@dataclass
class Selection:
    files: list[SourceFile]
    too_large: list[str]  # skipped for size, so the map can say so


def select_files(root: Path, max_bytes: int) -> Selection:
    """The files of ``root`` worth parsing, with the stat data the tag cache is keyed by."""
    root = root.resolve()
    prefix = len(str(root)) + 1
    files: list[SourceFile] = []
    too_large: list[str] = []
    for path in project_files(root, skip_dirs=WALK_SKIP):
        rel = str(path)[prefix:].replace(os.sep, "/")
        language = language_for(rel)
        if language is None or rel.endswith(GENERATED_SUFFIXES) or not VENDORED_DIRS.isdisjoint(rel.split("/")[:-1]):
            continue
        try:
            stat = path.stat()
        except OSError:
            continue  # vanished or unreadable since it was listed
        if stat.st_size > max_bytes:
            too_large.append(rel)
            continue
        files.append(SourceFile(rel, path, language, stat.st_mtime_ns, stat.st_size))
    return Selection(files, too_large)

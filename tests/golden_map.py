"""The golden repo map of tests/fixtures/context/sample_repo: shared by its test and by
scripts/regen_golden_map.py, which rewrites the golden file after an intended change."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "context"
SAMPLE = FIXTURES / "sample_repo"
GOLDEN = FIXTURES / "sample_repo.map.txt"
BUDGET = 400  # tokens (estimated): small enough that ranking decides what is left out


def sample_git_repo(target: Path) -> Path:
    """A fresh git repository holding the sample project (files added, not committed)."""
    shutil.copytree(SAMPLE, target)
    subprocess.run(["git", "init", "-q", "-b", "main", str(target)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(target), "add", "-A"], check=True, capture_output=True)
    return target


def render_sample_map(work: Path) -> str:
    from clovercode.context.index import IndexOptions, build_index
    from clovercode.context.repomap import make_repo_map

    root = sample_git_repo(work / "sample_repo")
    index = build_index(root, IndexOptions(cache_dir=None))
    return make_repo_map(index, BUDGET).text

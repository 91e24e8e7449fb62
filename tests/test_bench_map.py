"""`clovercode bench map` on a small tree: every run is a real `clovercode map` process, cold, warm and
touched, side by side with another checkout (here: this one) when asked."""

from pathlib import Path

import pytest
from conftest import run_cli
from golden_map import sample_git_repo

from clovercode.bench.map import BASELINE, package_parent, run_bench


@pytest.mark.slow
def test_bench_map_times_cold_warm_and_touched_side_by_side(tmp_path):
    tree = sample_git_repo(tmp_path / "sample")
    lines: list[str] = []
    status = run_bench(tree, 300, 1, lines.append, compare=Path(package_parent()))
    text = "\n".join(lines)
    assert status == 0  # (the targets are for the standard-library trees only)
    rows = {line.split()[1]: line.split() for line in lines if line.startswith("sample ")}
    assert set(rows) == {"cold", "warm", "touched"}
    assert int(rows["cold"][5]) == int(rows["cold"][4]) > 0  # every file parsed cold
    assert int(rows["warm"][5]) == 0 and int(rows["touched"][5]) == 1  # none warm, the edited one after
    assert all(row[-1].endswith("x") for row in rows.values())  # a ratio to the compared checkout
    assert "measured in alternation" in text
    assert (tree / "app").is_dir()  # the bench edits a copy, never the tree it was given


def test_bench_map_baseline_covers_every_default_run():
    assert set(BASELINE) == {"stdlib x1", "stdlib x4"}
    assert all(set(runs) == {"cold", "warm", "touched"} for runs in BASELINE.values())


def test_bench_map_compare_must_be_a_checkout(tmp_path):
    result = run_cli("bench", "map", str(tmp_path), "--compare", str(tmp_path))
    assert result.returncode == 2 and "not a clovercode checkout" in result.stderr

"""The suite never touches the real home: every test gets its own, and the run checks that it held."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import realhome
from conftest import REAL_HOME, REPO_ROOT, git, make_git_repo

# File times tick every few milliseconds and the watch counts the tick it began in: set-up done
# before the watch waits one tick out, or it would count as a change.
TICK = 0.025
ESCAPE = "CLOVER_TEST_ESCAPE_HOME"  # set only by the runs below: the escape test then writes into the real home
# What a module-level constant built from the environment sees (CI's run once wrote six REPL runs'
# trajectories and tag caches into the real home through `WIDE = cli_env(...)` in a test module).
AT_IMPORT = {name: os.environ.get(name, "") for name in ("HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")}


def test_the_home_git_and_the_caches_are_the_tests_own(isolated_home: Path, tmp_path: Path) -> None:
    assert os.environ["HOME"] == str(isolated_home)
    assert os.environ["XDG_CACHE_HOME"] == str(isolated_home / ".cache")
    assert os.environ["GIT_CONFIG_GLOBAL"] == str(isolated_home / ".gitconfig")
    assert os.environ["GIT_CONFIG_NOSYSTEM"] == "1"
    repo = make_git_repo(tmp_path / "r")
    git(repo, "config", "--global", "user.name", "Somebody")
    assert "Somebody" in (isolated_home / ".gitconfig").read_text()
    # Nothing from the host's system config shows through.
    assert "system" not in git(repo, "config", "--list", "--show-scope")


def test_what_a_module_reads_at_import_is_a_stand_in_home_not_the_real_one() -> None:
    for name, value in AT_IMPORT.items():
        assert value and not Path(value).resolve().is_relative_to(REAL_HOME.resolve()), (name, value)


def test_the_watch_names_what_was_created_changed_and_removed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "kept").mkdir(parents=True)
    (home / "kept" / "a").write_text("a")
    (home / "deep" / "er").mkdir(parents=True)
    (home / "deep" / "er" / "b").write_text("b")
    (home / "c").write_text("c")
    os.utime(home / "c", ns=(0, 0))  # an old mtime does not hide a later write: the check reads ctimes
    time.sleep(TICK)
    watch = realhome.watch(home)
    (home / "deep" / "er" / "b").write_text("changed")
    (home / "c").unlink()
    (home / "new").write_text("n")
    changed = realhome.changed_since(watch)
    assert {"deep/er/b", "new", "."} <= set(changed)  # "." is the home itself: c was removed from it
    assert "kept/a" not in changed and "kept" not in changed
    assert not watch.marker.exists()


def test_the_watch_skips_what_the_user_says_others_write(tmp_path: Path) -> None:
    (tmp_path / ".npm" / "_logs").mkdir(parents=True)
    time.sleep(TICK)
    watch = realhome.watch(tmp_path)
    (tmp_path / ".npm" / "_logs" / "x.log").write_text("x")
    (tmp_path / "mine").write_text("x")
    assert realhome.changed_since(watch, ignore=".npm/_logs:") == [".", "mine"]


def test_a_temp_directory_inside_the_home_is_not_a_leak(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(realhome.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    time.sleep(TICK)
    watch = realhome.watch(tmp_path)
    (tmp_path / "tmp" / "pytest-of-me").mkdir()
    (tmp_path / "leak").write_text("x")
    assert realhome.changed_since(watch) == [".", "leak"]


def test_the_suite_declares_the_pip_cache_it_shares(monkeypatch) -> None:
    from conftest import shared_with_the_suite

    monkeypatch.setenv("PIP_CACHE_DIR", str(REAL_HOME / "somewhere" / "pip"))
    assert shared_with_the_suite() == ["somewhere/pip"]
    monkeypatch.setenv("PIP_CACHE_DIR", "/elsewhere/pip")
    assert shared_with_the_suite() == []


def test_escape_into_the_real_home() -> None:
    """Run only by the test below: a test that writes where it must not."""
    if not os.environ.get(ESCAPE):
        pytest.skip("only inside test_a_run_leaves_an_empty_home_empty")
    (REAL_HOME / "escaped").write_text("leak")


def run_pytest(home: Path, *args: str, escape: bool) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != ESCAPE}
    env.update(HOME=str(home), PYTHONPATH=str(REPO_ROOT))
    env.pop("CLOVER_TEST_HOME_IGNORE", None)
    env.pop("CLOVER_TEST_REAL_HOME", None)  # the inner run's real home is ``home``, not this run's
    if escape:
        env[ESCAPE] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider", *args],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_a_run_leaves_an_empty_home_empty(tmp_path: Path) -> None:
    home = tmp_path / "empty-home"
    home.mkdir()
    # A test that writes git's global config, and the escape test (skipped here).
    here = "tests/test_hermetic.py"
    clean = run_pytest(home, f"{here}::test_the_home_git_and_the_caches_are_the_tests_own",
                       f"{here}::test_escape_into_the_real_home", escape=False)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert list(home.iterdir()) == []
    leaky = run_pytest(home, f"{here}::test_escape_into_the_real_home", escape=True)
    assert leaky.returncode == 1, leaky.stdout + leaky.stderr
    assert "1 passed" in leaky.stdout
    assert f"the test run changed the real home {home}:" in leaky.stdout
    assert "  escaped" in leaky.stdout


@pytest.mark.skipif(not any(Path(p, "xdist").is_dir() for p in sys.path if p), reason="pytest-xdist not installed")
def test_under_xdist_the_controller_sees_a_workers_escape(tmp_path: Path) -> None:
    home = tmp_path / "empty-home"
    home.mkdir()
    leaky = run_pytest(home, "-n", "2", "tests/test_hermetic.py::test_escape_into_the_real_home", escape=True)
    assert leaky.returncode == 1, leaky.stdout + leaky.stderr
    assert "  escaped" in leaky.stdout
    assert leaky.stdout.count("the test run changed the real home") == 1

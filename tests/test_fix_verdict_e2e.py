"""`clovercode fix` on a realistic repository (issue 12): several modules, one bug the issue names,
other tests that already fail, a slow test; the real CLI, real git, the real bubblewrap sandbox and
real pytest, with the model played by replay files.

Both tests fail without the test baseline: the pre-existing failures made a correct fix end
`tests_failed` after feedback rounds spent on other people's bugs, and the commit kept only the last
round's summary.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_env, default_sigint, git, make_git_repo, run_cli
from conftest import tool_call_text as call, write_replay as replay

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
FIXTURES = Path(__file__).resolve().parent / "fixtures"

SHOPKIT = {
    "README.md": "# shopkit\n\nSmall helpers for a web shop.\n",
    "conftest.py": "",
    "shopkit/__init__.py": "",
    "shopkit/text.py": (
        'import re\n\n\n'
        'def slugify(title):\n'
        '    """\'Hello, World!\' -> \'hello-world\'."""\n'
        '    slug = re.sub(r"[^a-z0-9]+", "-", title.lower())\n'
        '    return slug.lstrip("-")\n\n\n'
        'def truncate(text, width):\n'
        '    return text if len(text) <= width else text[: width - 1] + "…"\n'),
    "shopkit/money.py": (
        'def format_price(cents):\n'
        '    """1234 -> \'$12.34\'."""\n'
        '    return f"${cents // 100}.{cents % 100:02d}"\n'),
    "shopkit/inventory.py": (
        'def restock(stock, amount, capacity=100):\n'
        '    return stock + amount  # known bug: ignores the capacity\n\n\n'
        'def remove(stock, amount):\n'
        '    if amount > stock:\n'
        '        raise ValueError("not enough stock")\n'
        '    return stock - amount\n'),
    "shopkit/dates.py": (
        'def week_number(day):\n'
        '    return day.timetuple().tm_yday // 7 + 1  # known bug: not ISO weeks\n'),
    "tests/test_text.py": (
        'from shopkit.text import slugify, truncate\n\n\n'
        'def test_slugify_words():\n    assert slugify("Hello World") == "hello-world"\n\n\n'
        'def test_slugify_trailing_punctuation():\n    assert slugify("Hello, World!") == "hello-world"\n\n\n'
        'def test_truncate():\n    assert truncate("abcdef", 4) == "abc…"\n'),
    "tests/test_money.py": (
        'import time\n\nfrom shopkit.money import format_price\n\n\n'
        'def test_format_price():\n    assert format_price(1234) == "$12.34"\n    assert format_price(5) == "$0.05"\n\n\n'
        'def test_exchange_rate_refresh_is_slow():\n'
        '    started = time.monotonic()\n    time.sleep(0.4)  # stands for a slow service; looks flaky, is not\n'
        '    assert time.monotonic() - started >= 0.4\n'),
    "tests/test_inventory.py": (
        'import pytest\n\nfrom shopkit.inventory import remove, restock\n\n\n'
        'def test_restock_respects_capacity():\n    assert restock(90, 20) == 100\n\n\n'
        'def test_remove():\n    assert remove(5, 2) == 3\n    with pytest.raises(ValueError):\n        remove(1, 2)\n'),
    "tests/test_dates.py": (
        'import datetime\n\nfrom shopkit.dates import week_number\n\n\n'
        'def test_week_number_new_year():\n    assert week_number(datetime.date(2021, 1, 1)) == 53\n\n\n'
        'def test_week_number_march():\n    assert week_number(datetime.date(2021, 3, 10)) == 10\n'),
}
ISSUE = ("slugify() leaves a trailing dash\n\n"
         "`slugify(\"Hello, World!\")` returns `'hello-world-'`; product URLs end in a dash. It should be `'hello-world'`.")
FIXED_TEST = "tests/test_text.py::test_slugify_trailing_punctuation"
PRE_EXISTING = ["tests/test_dates.py::test_week_number_new_year", "tests/test_inventory.py::test_restock_respects_capacity"]
REGRESSION = "tests/test_money.py::test_format_price"
SLUG_SUMMARY = "slugify() stripped separators only at the start; it now strips them at both ends, so no URL ends in a dash."




FIX_SLUGIFY = [call("view_file", path="shopkit/text.py"),
               call("edit_file", path="shopkit/text.py", old_text='    return slug.lstrip("-")',
                    new_text='    return slug.strip("-")')]
BREAK_MONEY = [call("view_file", path="shopkit/money.py"),
               call("edit_file", path="shopkit/money.py", old_text='    return f"${cents // 100}.{cents % 100:02d}"',
                    new_text='    return f"${cents // 100}.{cents % 100}"')]


@pytest.fixture
def shop(tmp_path) -> Path:
    source = tmp_path / "src"
    for name, text in SHOPKIT.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    return make_git_repo(tmp_path / "shopkit", source)


def fix(work: Path, model: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = run_cli("fix", ISSUE, "--repo", str(work), "--sandbox", "workspace-write", "--model", f"replay:{model}",
                   "--test-command", f"{sys.executable} -m pytest -q", "--json", *args, env=cli_env(), timeout=300)
    try:
        return proc, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON on stdout\nstdout: {proc.stdout}\nstderr: {proc.stderr}") from None


@needs_bwrap
def test_a_correct_fix_passes_despite_failures_that_were_already_there(shop, tmp_path):
    model = replay(tmp_path / "good.jsonl", *FIX_SLUGIFY, call("finish", summary=SLUG_SUMMARY))
    proc, result = fix(shop, model)
    assert proc.returncode == 0, proc.stderr
    tests = result["tests"]
    assert result["status"] == "fixed" and tests["passed"] is False  # other people's bugs still fail
    assert tests["baseline"]["failing"] == sorted([FIXED_TEST, *PRE_EXISTING])
    assert tests["baseline"]["results"] == "junit" and tests["baseline"]["passed"] is False
    assert tests["fixed"] == [FIXED_TEST] and tests["regressions"] == []
    assert tests["still_failing"] == PRE_EXISTING and tests["per_test"] is True and tests["regressed"] is False
    assert len(tests["runs"]) == 1 and result["steps"] == 3  # no feedback round spent on pre-existing failures
    assert tests["runs"][0]["counts"] == {"passed": 7, "failed": 2, "skipped": 0}
    # the baseline's time is part of the run's
    assert result["seconds"] >= tests["baseline"]["seconds"] + tests["runs"][0]["seconds"]
    message = " ".join(git(shop, "log", "-1", "--format=%B").split())
    # every test named, one per line (the flattened message joins them with " - ")
    assert "Fixed (failed before, pass now): - tests/test_text.py::test_slugify_trailing_punctuation" in message
    assert "Regressions" not in message and "Still failing (failed before the change too)" in message
    assert git(shop, "diff", "--name-only", "HEAD~1", "HEAD").split() == ["shopkit/text.py"]
    # the reports went to a scratch directory outside the project: nothing stray in the tree
    stray = [line for line in git(shop, "status", "--porcelain", "--ignored").splitlines() if "__pycache__" not in line]
    assert stray == []
    assert "No failing test was fixed" not in proc.stderr and f"Fixed (failed before, pass now): {FIXED_TEST}" in proc.stderr
    kinds = [json.loads(line) for line in Path(result["trajectory"]).read_text().splitlines()]
    assert [e.get("baseline", False) for e in kinds if e["kind"] == "test_run"] == [True, False]


@needs_bwrap
def test_a_change_that_breaks_another_module_gets_it_back_and_ends_tests_failed(shop, tmp_path):
    model = replay(tmp_path / "bad.jsonl", *FIX_SLUGIFY, *BREAK_MONEY,
                   call("finish", summary=SLUG_SUMMARY + " format_price() is simpler now."),
                   call("finish", summary="The remaining failures are elsewhere."))
    proc, result = fix(shop, model, "--test-rounds", "1")
    assert proc.returncode == 1, proc.stderr
    tests = result["tests"]
    assert result["status"] == "tests_failed" and tests["regressions"] == [REGRESSION] and tests["regressed"] is True
    assert tests["fixed"] == [FIXED_TEST] and tests["still_failing"] == PRE_EXISTING
    assert [r["round"] for r in tests["runs"]] == [0, 1]
    assert f"1 regression: {REGRESSION}" in tests["verdict"] and REGRESSION in proc.stderr
    # the feedback named the regression, and listed the old failures apart, once
    events = [json.loads(line) for line in Path(result["trajectory"]).read_text().splitlines()]
    [feedback] = [e["task"] for e in events if e["kind"] == "run_start"][1:]
    regressions_part, _, rest = feedback.partition("These tests already failed before your change")
    assert "(regressions; fix them first):\n- tests/test_money.py::test_format_price" in regressions_part
    assert all(test not in regressions_part for test in PRE_EXISTING)
    assert all(f"- {test}" in rest.split("Output (the last part)")[0] for test in PRE_EXISTING)
    # the commit describes the change as a whole, not only the last round's "remaining failures" line
    message = " ".join(git(shop, "log", "-1", "--format=%B").split())
    assert SLUG_SUMMARY in message and "format_price() is simpler now." in message
    assert "After round 1 of test feedback: The remaining failures are elsewhere." in message
    assert f"Regressions (passed before, fail now): - {REGRESSION}" in message
    summary = proc.stderr[proc.stderr.index("Summary:"):]
    assert SLUG_SUMMARY[:40] in summary and "After round 1 of test feedback" in summary


def test_the_commit_describes_the_first_round_too(tmp_path):
    """Item 4: after a feedback round the commit held only the last finish summary."""
    work = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    proc = run_cli("fix", "format_duration(5400) gives 1h90m", "--repo", str(work), "--sandbox", "none",
                   "--model", f"replay:{FIXTURES / 'durations-feedback.replay.jsonl'}",
                   "--test-command", f"{sys.executable} -m pytest -q", "--json", env=cli_env())
    assert proc.returncode == 0, proc.stderr
    message = " ".join(git(work, "log", "-1", "--format=%B").split())
    assert "format_duration() now wraps minutes with seconds % 60." in message  # the first round's summary
    assert "After round 1 of test feedback: format_duration() counted minutes from zero" in message
    assert ("Fixed (failed before, pass now): - test_durations.py::FormatTest::test_hours_and_minutes "
            "- test_durations.py::FormatTest::test_round_trip") in message


def test_ctrl_c_during_the_baseline_is_an_interrupted_run_that_changed_nothing(tmp_path):
    import signal
    import time

    work = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    marker = tmp_path / "baseline-started"
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "fix", "format_duration(5400) gives 1h90m",
                             "--repo", str(work), "--model", f"replay:{FIXTURES / 'durations.replay.jsonl'}",
                             "--sandbox", "none", "--test-command", f"touch {marker}; sleep 60", "--json"],
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not marker.exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    result = json.loads(out)
    assert result["status"] == "interrupted" and result["detail"] == "interrupted by the user (Ctrl-C) while the baseline tests ran"
    assert result["steps"] == 0 and result["commit"] is None and result["tests"]["runs"] == []
    assert git(work, "status", "--porcelain") == "" and git(work, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"

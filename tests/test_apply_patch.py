"""apply_patch: the `*** Begin Patch` grammar, success scenarios, and all-or-nothing failures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clovercode.actions.context import ToolContext, ToolError
from clovercode.actions.files import view_file
from clovercode.actions.patch import FileOp, Hunk, apply_hunks, parse_patch
from clovercode.actions.patching import apply_patch
from clovercode.actions.toolbox import Toolbox
from clovercode.executors.local import LocalExecutor
from clovercode.toolcalls.validate import CheckedCall

CALC = "def mean(values):\n    return sum(values) // len(values)\n\n\ndef spread(values):\n    return max(values) - min(values)\n"
UTIL = "import os\n\n\ndef helper():\n    return 1\n"


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "calc.py").write_text(CALC)
    (root / "pkg" / "util.py").write_text(UTIL)
    (root / "old.txt").write_text("obsolete\n")
    return root


def ctx_for(root: Path, *viewed: str) -> ToolContext:
    ctx = ToolContext(root, LocalExecutor())
    for name in viewed:
        view_file(ctx, {"path": name})
    return ctx


def patch(*body: str) -> dict:
    return {"patch": "\n".join(("*** Begin Patch", *body, "*** End Patch"))}


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_parse_every_operation():
    ops = parse_patch("\n".join([
        "*** Begin Patch", "*** Add File: new.py", "+a", "+b", "*** Delete File: old.txt",
        "*** Update File: calc.py", "*** Move to: stats.py", "@@ def mean(values):", " x", "-y", "+z", "",
        "*** End of File", "*** End Patch"]))
    assert ops == [
        FileOp("add", "new.py", "a\nb\n"),
        FileOp("delete", "old.txt"),
        FileOp("update", "calc.py", move_to="stats.py",
               hunks=(Hunk("def mean(values):", ((" ", "x"), ("-", "y"), ("+", "z"), (" ", "")), True),)),
    ]


@pytest.mark.parametrize("text,message", [
    ("*** Update File: a.py\n@@\n-x\n*** End Patch", "must start with '\\*\\*\\* Begin Patch'"),
    ("*** Begin Patch\n*** Frobnicate: a.py\n*** End Patch", "patch line 2: expected"),
    ("*** Begin Patch\n*** Add File: a.py\nno plus\n*** End Patch", "every line of an added file starts with"),
    ("*** Begin Patch\n*** Update File: a.py\n*** End Patch", "has no hunks"),
    ("*** Begin Patch\n*** Update File: a.py\n@@\n?x\n*** End Patch", "hunk lines start with"),
    ("*** Begin Patch\n*** End Patch", "changes no file"),
])
def test_malformed_patches_are_explained(text, message):
    with pytest.raises(ToolError, match=message):
        parse_patch(text)


def test_a_fenced_patch_is_accepted():
    assert parse_patch("```diff\n*** Begin Patch\n*** Delete File: a\n*** End Patch\n```") == [FileOp("delete", "a")]


def test_multi_file_patch_applies_add_delete_update_and_move(project):
    ctx = ctx_for(project, "calc.py", "pkg/util.py")
    obs = apply_patch(ctx, patch(
        "*** Update File: calc.py",
        "@@ def mean(values):",
        "-    return sum(values) // len(values)",
        "+    return sum(values) / len(values)",
        "*** Update File: pkg/util.py",
        "*** Move to: pkg/helpers.py",
        "@@",
        " def helper():",
        "-    return 1",
        "+    return 2",
        "*** Add File: pkg/__init__.py",
        "+from pkg.helpers import helper",
        "*** Delete File: old.txt",
    ))
    assert obs.ok, obs.text
    assert (project / "calc.py").read_text() == CALC.replace("//", "/")
    assert not (project / "pkg" / "util.py").exists()
    assert (project / "pkg" / "helpers.py").read_text() == UTIL.replace("return 1", "return 2")
    assert (project / "pkg" / "__init__.py").read_text() == "from pkg.helpers import helper\n"
    assert not (project / "old.txt").exists()
    assert "pkg/util.py → pkg/helpers.py" in obs.text and "old.txt (deleted)" in obs.text
    assert ctx.changed == {"calc.py", "pkg/util.py", "pkg/helpers.py", "pkg/__init__.py", "old.txt"}


def test_a_moved_file_keeps_its_mode(project):
    (project / "pkg" / "util.py").chmod(0o750)
    ctx = ctx_for(project, "pkg/util.py")
    apply_patch(ctx, patch("*** Update File: pkg/util.py", "*** Move to: bin/util.py", "@@", "-import os", "+import sys"))
    assert (project / "bin" / "util.py").stat().st_mode & 0o777 == 0o750


@pytest.mark.parametrize("second,message", [
    (["*** Update File: pkg/util.py", "@@", "-    return 42", "+    return 2"], "hunk 1: its context and removed lines were not found"),
    (["*** Add File: pkg/util.py", "+x"], "already exists"),
    (["*** Delete File: missing.txt"], "does not exist"),
    (["*** Update File: .git/config", "@@", "-a", "+b"], "is protected"),
    (["*** Update File: ../escape.py", "@@", "-a", "+b"], "outside the project"),
    (["*** Update File: pkg/util.py", "*** Move to: old.txt", "@@", "-import os", "+import sys"], "already exists"),
    (["*** Update File: calc.py", "@@", "-    return max(values) - min(values)", "+    return 0"], "more than once"),
])
def test_a_patch_that_fails_anywhere_changes_nothing(project, second, message):
    ctx = ctx_for(project, "calc.py", "pkg/util.py")
    before = snapshot(project)
    with pytest.raises(ToolError, match=message):
        apply_patch(ctx, patch(
            "*** Update File: calc.py", "@@", "-    return sum(values) // len(values)", "+    return 0",
            "*** Add File: brand_new.py", "+x = 1",
            *second))
    assert snapshot(project) == before
    assert ctx.changed == set()


def test_update_requires_a_current_view(project):
    with pytest.raises(ToolError, match="You have not viewed pkg/util.py"):
        apply_patch(ctx_for(project, "calc.py"), patch("*** Update File: pkg/util.py", "@@", "-import os", "+import sys"))


def test_an_ambiguous_hunk_is_refused_and_an_at_at_header_disambiguates(project):
    text = "def a():\n    return 1\n\ndef b():\n    return 1\n"
    (project / "two.py").write_text(text)
    ctx = ctx_for(project, "two.py")
    with pytest.raises(ToolError, match="match 2 places at lines 2, 5"):
        apply_patch(ctx, patch("*** Update File: two.py", "@@", "-    return 1", "+    return 2"))
    assert (project / "two.py").read_text() == text
    apply_patch(ctx, patch("*** Update File: two.py", "@@ def b():", "-    return 1", "+    return 2"))
    assert (project / "two.py").read_text() == "def a():\n    return 1\n\ndef b():\n    return 2\n"


def test_hunks_apply_in_order_with_tolerant_context():
    text = "a\nb  \nc\nd\ne\n"
    hunks = (Hunk("", ((" ", "a"), (" ", "b"), ("-", "c"), ("+", "C"))), Hunk("", ((" ", "d"), ("+", "d2"))))
    # context "b" matches "b  " only ignoring trailing whitespace; the file's own line is kept
    assert apply_hunks(text, hunks, "f") == "a\nb  \nC\nd\nd2\ne\n"


def test_end_of_file_anchors_the_hunk():
    text = "x\ny\nx\n"
    assert apply_hunks(text, (Hunk("", ((" ", "x"), ("+", "z")), True),), "f") == "x\ny\nx\nz\n"


def test_pure_addition_goes_at_the_end_or_after_the_header():
    assert apply_hunks("a\nb\n", (Hunk("", (("+", "c"),)),), "f") == "a\nb\nc\n"
    assert apply_hunks("a\nb\n", (Hunk("a", (("+", "a2"),)),), "f") == "a\na2\nb\n"


def test_crlf_files_stay_crlf(project):
    (project / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    ctx = ctx_for(project, "win.txt")
    apply_patch(ctx, patch("*** Update File: win.txt", "@@", " one", "-two", "+2"))
    assert (project / "win.txt").read_bytes() == b"one\r\n2\r\n"


def test_a_write_failure_midway_rolls_back_the_files_already_written(project, monkeypatch):
    ctx = ctx_for(project, "calc.py", "pkg/util.py")
    before = snapshot(project)
    real_replace, calls = os.replace, []

    def failing_replace(src, dst, **dir_fds):
        calls.append(dst)
        if len(calls) == 3:  # calc.py and brand_new.py are written; util.py fails (disk full)
            raise OSError(28, "No space left on device")
        return real_replace(src, dst, **dir_fds)

    monkeypatch.setattr("clovercode.trust.projectview.os.replace", failing_replace)
    with pytest.raises(ToolError, match="No space left on device.*nothing was changed"):
        apply_patch(ctx, patch(
            "*** Update File: calc.py", "@@", "-    return sum(values) // len(values)", "+    return 0",
            "*** Add File: brand_new.py", "+x = 1",
            "*** Update File: pkg/util.py", "@@", "-import os", "+import sys"))
    monkeypatch.undo()
    assert snapshot(project) == before


def test_apply_patch_is_a_registered_tool(project):
    toolbox = Toolbox(ctx_for(project, "calc.py"))
    assert "apply_patch" in toolbox.names
    obs = toolbox.execute(CheckedCall("c1", "apply_patch", patch("*** Update File: calc.py", "@@", "-    return sum(values) // len(values)", "+    return 0")))
    assert obs.ok, obs.text

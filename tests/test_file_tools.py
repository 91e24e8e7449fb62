"""The hardened file tools: containment, protected paths, secrets, binary refusal, encodings and
line endings, mode and owner, atomic writes, read-before-edit, layered matching, diffs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from clovercode.actions.context import ApprovalRequest, ToolContext, ToolError
from clovercode.actions.editing import edit_file, write_file
from clovercode.actions.files import list_files, search_text, view_file
from clovercode.actions.guards import FileGuard
from clovercode.executors.local import LocalExecutor
from conftest import REPO_ROOT


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "calc.py").write_text("def mean(values):\n    return sum(values) // len(values)\n")
    return root


def make_ctx(root: Path, **kw) -> ToolContext:
    return ToolContext(root, LocalExecutor(), **kw)


def view(ctx: ToolContext, path: str) -> str:
    return view_file(ctx, {"path": path}).text


def edit(ctx: ToolContext, path: str, old: str, new: str, **kw):
    return edit_file(ctx, {"path": path, "old_text": old, "new_text": new, **kw})


# --- containment -------------------------------------------------------------------------------

@pytest.mark.parametrize("given", ["../outside.txt", "sub/../../outside.txt"])
def test_paths_outside_the_project_are_refused(project, given):
    (project.parent / "outside.txt").write_text("secret\n")
    ctx = make_ctx(project)
    with pytest.raises(ToolError, match="outside the project"):
        view(ctx, given)
    with pytest.raises(ToolError, match="outside the project"):
        write_file(ctx, {"path": given, "content": "x"})
    assert (project.parent / "outside.txt").read_text() == "secret\n"


def test_absolute_paths_only_inside_the_project(project):
    ctx = make_ctx(project)
    assert "def mean" in view(ctx, str(project / "calc.py"))
    with pytest.raises(ToolError, match="outside the project"):
        view(ctx, "/etc/passwd")


def test_symlinks_pointing_out_are_refused(project):
    outside = project.parent / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("original\n")
    (project / "link.txt").symlink_to(outside / "f.txt")
    (project / "linkdir").symlink_to(outside)
    ctx = make_ctx(project)
    with pytest.raises(ToolError, match="outside the project"):
        view(ctx, "link.txt")
    with pytest.raises(ToolError, match="outside the project"):
        write_file(ctx, {"path": "link.txt", "content": "pwned\n"})
    with pytest.raises(ToolError, match="outside the project"):
        write_file(ctx, {"path": "linkdir/new.txt", "content": "pwned\n"})
    assert (outside / "f.txt").read_text() == "original\n" and not (outside / "new.txt").exists()


def test_symlink_inside_the_project_edits_its_target(project):
    (project / "alias.py").symlink_to(project / "calc.py")
    ctx = make_ctx(project)
    view(ctx, "alias.py")
    edit(ctx, "alias.py", "//", "/")
    assert (project / "alias.py").is_symlink()
    assert "sum(values) / len(values)" in (project / "calc.py").read_text()


@pytest.mark.parametrize("path", [".git/config", ".git/hooks/pre-commit", "vendor/lib/.git/config", ".bashrc",
                                  "clovercode.toml", ".gitconfig"])
def test_protected_paths_are_refused(project, path):
    ctx = make_ctx(project)
    with pytest.raises(ToolError, match="is protected"):
        write_file(ctx, {"path": path, "content": "x\n"})
    assert not (project / path).exists()


def test_git_reached_through_a_symlink_is_still_protected(project):
    (project / ".git").mkdir()
    (project / "g").symlink_to(project / ".git")
    with pytest.raises(ToolError, match="is protected"):
        write_file(make_ctx(project), {"path": "g/config", "content": "x\n"})


def test_secrets_are_neither_read_nor_listed_nor_searched(project):
    (project / ".ssh").mkdir()
    (project / ".ssh" / "id_ed25519").write_text("PRIVATE KEY canary\n")
    (project / "notes.txt").write_text("canary in notes\n")
    ctx = make_ctx(project, guard=FileGuard.from_policy_data({"HOME": str(project)}))  # a project that is a home
    with pytest.raises(ToolError, match="secrets"):
        view(ctx, ".ssh/id_ed25519")
    assert ".ssh" not in list_files(ctx, {}).text
    hits = search_text(ctx, {"pattern": "canary"}).text
    assert "notes.txt" in hits and "id_ed25519" not in hits


def test_git_config_where_a_checkout_leaves_its_token_is_not_read(project):
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run(["git", "-C", str(project), "config", "http.https://github.com/.extraheader",
                    "AUTHORIZATION: basic canary"], check=True)
    ctx = make_ctx(project, guard=FileGuard.from_policy_data({"HOME": "/nonexistent"}))
    for path in (".git/config", str(project / ".git" / "config")):
        with pytest.raises(ToolError, match="secrets"):
            view(ctx, path)
    assert "basic canary" not in search_text(ctx, {"pattern": "basic", "path": ".git"}).text


# --- content rules -----------------------------------------------------------------------------

def test_binary_files_are_refused(project):
    (project / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02binary")
    (project / "noise.dat").write_bytes(bytes(range(1, 32)) * 50)
    ctx = make_ctx(project)
    for name in ("blob.bin", "noise.dat"):
        with pytest.raises(ToolError, match="binary file"):
            view(ctx, name)
    with pytest.raises(ToolError, match="binary file"):
        write_file(ctx, {"path": "blob.bin", "content": "x"})
    assert (project / "blob.bin").read_bytes().startswith(b"\x7fELF\x00")


def test_crlf_line_endings_are_kept(project):
    (project / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    ctx = make_ctx(project)
    view(ctx, "win.txt")
    edit(ctx, "win.txt", "two\n", "TWO\nand a half\n")
    assert (project / "win.txt").read_bytes() == b"one\r\nTWO\r\nand a half\r\nthree\r\n"


def test_mixed_line_endings_are_left_alone(project):
    (project / "mixed.txt").write_bytes(b"a\r\nb\nc\r\n")
    ctx = make_ctx(project)
    view(ctx, "mixed.txt")
    edit(ctx, "mixed.txt", "b", "B")
    assert (project / "mixed.txt").read_bytes() == b"a\r\nB\nc\r\n"


@pytest.mark.parametrize("encoding,bom", [("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"), ("latin-1", b"")])
def test_encodings_and_boms_are_kept(project, encoding, bom):
    (project / "enc.txt").write_bytes(bom + "café = 1\nthé = 2\n".encode(encoding))
    ctx = make_ctx(project)
    assert "café" in view(ctx, "enc.txt")
    edit(ctx, "enc.txt", "thé = 2", "thé = 3")
    assert (project / "enc.txt").read_bytes() == bom + "café = 1\nthé = 3\n".encode(encoding)


def test_a_character_the_encoding_cannot_hold_is_refused(project):
    (project / "old.txt").write_bytes("naïve\xff\n".encode("latin-1"))
    ctx = make_ctx(project)
    view(ctx, "old.txt")
    with pytest.raises(ToolError, match="latin-1-encoded"):
        edit(ctx, "old.txt", "naïve", "naïve → smart")
    assert (project / "old.txt").read_bytes() == "naïve\xff\n".encode("latin-1")


def test_file_mode_and_owner_are_kept(project):
    script = project / "run.sh"
    script.write_text("#!/bin/sh\necho old\n")
    script.chmod(0o751)
    if os.geteuid() == 0:
        os.chown(script, 1234, 4321)
    ctx = make_ctx(project)
    view(ctx, "run.sh")
    edit(ctx, "run.sh", "old", "new")
    info = script.stat()
    assert info.st_mode & 0o7777 == 0o751
    if os.geteuid() == 0:
        assert (info.st_uid, info.st_gid) == (1234, 4321)
    assert script.read_text() == "#!/bin/sh\necho new\n"


# --- atomic writes -----------------------------------------------------------------------------

HELD_WRITE = textwrap.dedent("""\
    import os, sys, time
    from pathlib import Path
    from clovercode.actions import fileio
    def held_fsync(fd):  # the data is in the temp file; hold here until we are killed
        print("WRITING", flush=True)
        time.sleep(60)
    fileio.os.fsync = held_fsync
    fileio.write_atomic(Path(sys.argv[1]), b"new content\\n" * 1000)
""")

BIG_WRITE = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from clovercode.actions.fileio import write_atomic
    write_atomic(Path(sys.argv[1]), b"x" * (300 * 1024 * 1024))
""")


def _spawn(script: str, target: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, str(target)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def test_a_write_killed_midway_leaves_the_original_intact(project):
    target = project / "calc.py"
    original = target.read_bytes()
    proc = _spawn(HELD_WRITE, target)
    assert proc.stdout.readline().strip() == "WRITING"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert target.read_bytes() == original
    leftovers = list(project.glob(".calc.py.*.clovercode-tmp"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0  # the killed writer's temp file
    ctx = make_ctx(project)
    view(ctx, "calc.py")
    edit(ctx, "calc.py", "//", "/")  # the next write clears the dead writer's leftover
    assert list(project.glob(".calc.py.*.clovercode-tmp")) == []


def test_a_large_write_killed_while_writing_leaves_the_original_intact(project):
    target = project / "calc.py"
    original = target.read_bytes()
    proc = _spawn(BIG_WRITE, target)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(p.stat().st_size > 0 for p in project.glob(".calc.py.*")):
        time.sleep(0.001)
    proc.kill()
    proc.wait()
    assert target.read_bytes() == original


# --- read-before-edit --------------------------------------------------------------------------

def test_editing_an_unviewed_file_is_refused(project):
    ctx = make_ctx(project)
    with pytest.raises(ToolError, match="You have not viewed calc.py"):
        edit(ctx, "calc.py", "//", "/")
    with pytest.raises(ToolError, match="You have not viewed calc.py"):
        write_file(ctx, {"path": "calc.py", "content": "x = 1\n"})
    assert "//" in (project / "calc.py").read_text()
    write_file(ctx, {"path": "new.py", "content": "x = 1\n"})  # creating a file needs no view
    assert (project / "new.py").read_text() == "x = 1\n"


def test_a_file_changed_on_disk_since_viewing_must_be_viewed_again(project):
    ctx = make_ctx(project)
    view(ctx, "calc.py")
    (project / "calc.py").write_text("def mean(values):\n    return sum(values) // len(values)  # user\n")
    with pytest.raises(ToolError, match="changed on disk since you last viewed it"):
        edit(ctx, "calc.py", "//", "/")
    view(ctx, "calc.py")
    edit(ctx, "calc.py", "//", "/")
    edit(ctx, "calc.py", "# user", "# user, reviewed")  # its own edit does not invalidate what it knows


# --- matching ----------------------------------------------------------------------------------

def viewed(project: Path, name: str, text: str) -> ToolContext:
    (project / name).write_text(text)
    ctx = make_ctx(project)
    view(ctx, name)
    return ctx


def test_multiple_exact_matches_list_their_line_numbers(project):
    ctx = viewed(project, "m.py", "x = 1\ny = 2\nx = 1\n\nx = 1\n")
    with pytest.raises(ToolError, match=r"occurs 3 times in m.py \(at lines 1, 3, 5\)"):
        edit(ctx, "m.py", "x = 1", "x = 9")
    edit(ctx, "m.py", "x = 1", "x = 9", replace_all=True)
    assert (project / "m.py").read_text() == "x = 9\ny = 2\nx = 9\n\nx = 9\n"


def test_trailing_whitespace_tolerance(project):
    ctx = viewed(project, "t.py", "def f():   \n    return 1\t\n")
    obs = edit(ctx, "t.py", "def f():\n    return 1\n", "def f():\n    return 2\n")
    assert (project / "t.py").read_text() == "def f():\n    return 2\n"
    assert "ignoring trailing whitespace" in obs.text


def test_indentation_tolerance_reindents_the_new_text(project):
    ctx = viewed(project, "i.py", "class A:\n    def f(self):\n        return 1\n")
    edit(ctx, "i.py", "def f(self):\n    return 1", "def f(self):\n    x = 1\n    return x")
    assert (project / "i.py").read_text() == "class A:\n    def f(self):\n        x = 1\n        return x\n"


def test_unicode_punctuation_tolerance(project):
    ctx = viewed(project, "u.py", "msg = \u201chello\u201d  # \u2014 greeting\n")
    edit(ctx, "u.py", 'msg = "hello"  # - greeting', 'msg = "hi"')
    assert (project / "u.py").read_text() == 'msg = "hi"\n'


def test_an_ambiguous_tolerant_match_is_never_applied(project):
    text = "if a:\n    go()\nif b:\n  go()\n"
    ctx = viewed(project, "a.py", text)
    with pytest.raises(ToolError, match=r"ignoring indentation it matches 2 places \(lines 2, 4\)"):
        edit(ctx, "a.py", "go()  \n", "stop()\n")
    assert (project / "a.py").read_text() == text


def test_not_found_shows_the_closest_lines(project):
    ctx = viewed(project, "calc.py", (project / "calc.py").read_text())
    with pytest.raises(ToolError) as err:
        edit(ctx, "calc.py", "    return sum(vals) // len(vals)\n", "x\n")
    message = str(err.value)
    assert "old_text was not found in calc.py. Did you mean lines 2-2" in message
    assert "2\t    return sum(values) // len(values)" in message


# --- observation, approval, checkpoint ------------------------------------------------------------

def test_a_successful_edit_returns_a_compact_diff(project):
    ctx = viewed(project, "calc.py", (project / "calc.py").read_text())
    obs = edit(ctx, "calc.py", "//", "/")
    assert obs.ok and obs.text.startswith("Changed calc.py (+1 -1):")
    assert "-    return sum(values) // len(values)" in obs.text and "+    return sum(values) / len(values)" in obs.text
    assert obs.data["diff"] and ctx.changed == {"calc.py"}


def test_a_declined_edit_changes_nothing_and_the_request_shows_the_diff(project):
    seen: list[ApprovalRequest] = []
    ctx = viewed(project, "calc.py", (project / "calc.py").read_text())
    ctx.approve = lambda request: seen.append(request) or False
    with pytest.raises(ToolError, match="declined"):
        edit(ctx, "calc.py", "//", "/")
    assert "//" in (project / "calc.py").read_text()
    assert seen[0].kind == "edit" and "+    return sum(values) / len(values)" in seen[0].detail


def test_the_checkpoint_hook_runs_before_the_write(project):
    states = []
    ctx = viewed(project, "calc.py", (project / "calc.py").read_text())
    ctx.checkpoint = lambda: states.append((project / "calc.py").read_text()) or "warning: no checkpoint"
    obs = edit(ctx, "calc.py", "//", "/")
    assert states and "//" in states[0]
    assert "warning: no checkpoint" in obs.text

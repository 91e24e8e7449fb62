"""Secrets by content where names fail, and trees of any depth (issue 45, point 5 and "Smaller").

A CI checkout leaves `gha-creds-*.json` (a Google service-account key) in the workspace; a file
with a second name (a hard link) may be ~/.aws/credentials; both were returned by view_file and
search_text. The project view now refuses a file whose first bytes have a credential's shape, and
a regular file with other hard links unless git tracks it, for every reader (file tools, the repo
map, directory checkpoints). A 1,100-level tree a command makes no longer crashes a walk with
RecursionError. docs/security.md, "The project view"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import EXAMPLES, cli_env, git, make_git_repo, run_cli, tool_call_text

from clovercode.actions.context import ToolContext, ToolError
from clovercode.actions.files import list_files, search_text, view_file
from clovercode.actions.guards import FileGuard
from clovercode.context.index import read_source
from clovercode.executors.local import LocalExecutor
from clovercode.sandboxing.policy import load_policy
from clovercode.sandboxing.survey import remove_created, survey
from clovercode.trust.projectview import ProjectView, SecretPath
from clovercode.trust.secretshape import looks_like_credential
from clovercode.trust.treewalk import TreeTooLarge, iter_tree
from clovercode.vcs.checkpoint import CHECKPOINTS, open_store, undo
from clovercode.vcs.dircheckpoint import DirStore

HAS_BWRAP = shutil.which("bwrap") is not None
KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
GHA_CREDS = json.dumps({
    "type": "service_account", "project_id": "prod-1", "private_key_id": "0123abcd",
    "private_key": f"-----BEGIN PRIVATE KEY-----\n{KEY_BODY}\n-----END PRIVATE KEY-----\n",
    "client_email": "deploy@prod-1.iam.gserviceaccount.com"}, indent=2)
DEPTH = 1100


@pytest.fixture
def shm_path(tmp_path):
    """A scratch directory in memory where there is one: deleting 1,100 nested directories costs
    seconds on a loaded disk and well under one in /dev/shm."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="clovercode-deep-", dir="/dev/shm"))
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=False)  # shutil.rmtree recurses (3.11)


def tool_ctx(root: Path) -> ToolContext:
    return ToolContext(root, LocalExecutor(), guard=FileGuard.from_policy_data(os.environ, root))


def deep_tree(root: Path, depth: int = DEPTH, name: str = "d") -> str:
    """``depth`` nested directories with a file at the bottom (os.makedirs itself recurses)."""
    fd = os.open(root, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)
    return "/".join([name] * depth) + "/bottom.txt"


def test_credential_shapes_and_look_alikes():
    assert looks_like_credential(GHA_CREDS.encode())
    assert looks_like_credential("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE\n".encode())
    assert looks_like_credential(b"-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,AB\n\n"
                                 + KEY_BODY.encode())
    assert looks_like_credential(b"[default]\naws_access_key_id = AKIAZZZZZZZZZZZZZZZZ\n"
                                 b"aws_secret_access_key = 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\n")
    # Code and docs that only mention the shapes are read as before.
    assert not looks_like_credential(b'PEM_HEADER = "-----BEGIN RSA PRIVATE KEY-----"\nif line == PEM_HEADER:\n')
    assert not looks_like_credential(b'creds = {"type": "service_account"}  # see docs\n')
    assert not looks_like_credential(b"aws_secret_access_key = os.environ['AWS_SECRET_ACCESS_KEY']\n")


def test_view_file_search_text_and_the_repo_map_never_return_gha_creds(tmp_path):
    root = make_git_repo(tmp_path / "proj")
    (root / "gha-creds-1a2b3c.json").write_text(GHA_CREDS)  # untracked, not ignored: as the action leaves it
    (root / "notes.txt").write_text(f"pasted:\n-----BEGIN PRIVATE KEY-----\n{KEY_BODY}\n")
    (root / "app.py").write_text("private_key = load()\n")
    ctx = tool_ctx(root)
    for name in ("gha-creds-1a2b3c.json", "notes.txt"):
        with pytest.raises(ToolError, match="credentials or other secrets"):
            view_file(ctx, {"path": name})
    found = search_text(ctx, {"pattern": "private_key|PRIVATE KEY|MIIE"}).text
    assert "app.py" in found and "gha-creds" not in found and "notes.txt" not in found and KEY_BODY not in found
    with pytest.raises(SecretPath):
        read_source("gha-creds-1a2b3c.json", str(root / "gha-creds-1a2b3c.json"), {})


def test_a_hard_link_to_a_file_outside_the_project_is_refused_unless_git_tracks_it(tmp_path):
    outside = tmp_path / "home" / ".aws"
    outside.mkdir(parents=True)
    (outside / "credentials").write_text("[default]\ntoken = not-shaped-like-anything\n")
    root = make_git_repo(tmp_path / "proj")
    os.link(outside / "credentials", root / "notes.md")
    ctx = tool_ctx(root)
    with pytest.raises(ToolError, match="credentials or other secrets"):
        view_file(ctx, {"path": "notes.md"})
    assert "not-shaped" not in search_text(ctx, {"pattern": "token"}).text
    # A hard link git records is the project's own file: read as any other.
    (root / "README.md").write_text("# readme\n")
    os.link(root / "README.md", root / "README-copy.md")
    git(root, "add", "README.md", "README-copy.md")
    assert "# readme" in view_file(tool_ctx(root), {"path": "README-copy.md"}).text


def test_a_1100_level_tree_is_walked_listed_and_undone(shm_path, isolated_home):
    plain = shm_path / "plain"
    plain.mkdir()
    (plain / "keep.py").write_text("x = 1\n")
    store = open_store(plain, os.environ)
    store.save(CHECKPOINTS, "before")
    bottom = deep_tree(plain)
    assert list(ProjectView(plain).walk()) == ["keep.py", bottom]
    listed = list_files(tool_ctx(plain), {"max_depth": DEPTH + 1}).text
    assert bottom in listed
    restored = undo(plain, os.environ)  # RecursionError (exit 70) before
    assert restored.changed == [bottom] and not (plain / "d").exists() and (plain / "keep.py").exists()
    repo = make_git_repo(shm_path / "repo")
    open_store(repo, os.environ).save(CHECKPOINTS, "before")
    deep_tree(repo)
    undo(repo, os.environ)
    assert not (repo / "d").exists()


def test_a_walk_is_bounded_by_a_count_with_a_clear_error(tmp_path):
    deep_tree(tmp_path, depth=30)
    with pytest.raises(TreeTooLarge, match="more than 10 directories"):
        list(iter_tree(str(tmp_path), [], max_dirs=10))
    assert list(iter_tree(str(tmp_path), [], max_dirs=10, quiet=True)) == []


def test_a_deep_tree_at_a_protected_path_is_removed_after_the_command(shm_path):
    root = make_git_repo(shm_path / "proj")
    layout = survey(load_policy("workspace-write"), root, root, {})
    (root / ".envrc").mkdir()
    deep_tree(root / ".envrc")
    assert remove_created(layout) == [".envrc"] and not (root / ".envrc").exists()


def test_checkpoints_in_the_home_copy_no_secrets(tmp_path, isolated_home):
    home = isolated_home
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("ssh key body\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("[default]\nx = y\n")
    (home / "gha-creds-9.json").write_text(GHA_CREDS)
    (home / "todo.txt").write_text("buy milk\n")
    store = open_store(home, os.environ)
    assert isinstance(store, DirStore)
    store.save(CHECKPOINTS, "in the home")
    kept = b"".join(p.read_bytes() for p in store.objects.iterdir())
    assert b"buy milk" in kept
    assert b"ssh key body" not in kept and b"x = y" not in kept and KEY_BODY.encode() not in kept
    manifest = next((store.home / CHECKPOINTS).glob("*.json")).read_text()
    assert ".ssh" not in manifest and ".aws" not in manifest and "gha-creds" not in manifest


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
def test_exec_and_undo_survive_a_deep_tree_a_sandboxed_command_makes(tmp_path):
    base = Path(os.path.realpath("/var/tmp")) / f"clovercode-deep-{tmp_path.name}"
    try:
        work = Path(shutil.copytree(EXAMPLES / "calc", base / "calc"))
        path = "$(printf 'd/%.0s' $(seq 1100))"
        turns = [tool_call_text("run_command", command=f"mkdir -p {path} && touch {path}f"), "Made a deep tree."]
        replay = tmp_path / "turns.jsonl"
        replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
        env = cli_env(HOME=str(tmp_path / "home"), XDG_STATE_HOME=str(tmp_path / "state"))
        proc = run_cli("exec", "--approval", "full-auto", "--model", f"replay:{replay}", "make a tree", cwd=work, env=env)
        assert proc.returncode == 0, proc.stderr
        assert (work / "d" / "d").is_dir()
        undone = run_cli("undo", "--repo", str(work), env=env)
        assert undone.returncode == 0, undone.stderr
        assert not (work / "d").exists() and (work / "calc.py").exists()
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)

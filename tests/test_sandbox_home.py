"""The sandbox hides the home directory: real bubblewrap over a fake home holding marker secrets.

Only the toolchain caches of sandbox/home.toml, the PATH directories in the home and a copy of
~/.gitconfig rebuilt from an allowlist come back; `sandbox_show` (the user's config) adds paths, and the credential
stores of sandbox/secrets.toml stay hidden whatever is shown. The world lives under /var/tmp so
that the private /tmp is not what hides it."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import git, make_git_repo

from clovercode.executors.bwrap import BwrapExecutor
from clovercode.sandboxing.argv import Layout, bwrap_argv
from clovercode.sandboxing.policy import Policy, load_policy
from clovercode.trust.gitconfigcopy import rebuild_config

MARK = "marker-secret-7c2e"
# the list and then some: each must read as nothing inside the sandbox
STORES = [".claude/.credentials.json", ".claude.json", ".codex/auth.json", ".gemini/oauth_creds.json", ".gemini/.env",
          ".config/github-copilot/apps.json", ".cache/huggingface/token", ".cache/huggingface/stored_tokens",
          ".m2/settings.xml", ".config/pip/pip.conf", ".kaggle/kaggle.json", ".bash_history", ".zsh_history",
          ".ipython/profile_default/history.sqlite", ".netrc", ".docker/config.json", ".ssh/id_rsa",
          ".config/gh/hosts.yml", "notes/private.txt"]
GITCONFIG = f"""[user]
\tname = Me
\temail = me@example.invalid
[credential]
\thelper = store
[http "https://github.com/"]
\textraheader = AUTHORIZATION: basic {MARK}
[alias]
\tst = status
"""


@pytest.fixture
def home():
    base = Path(tempfile.mkdtemp(prefix="clovercode-home-", dir="/var/tmp"))
    try:
        home = base / "home"
        for rel in STORES:
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            (home / rel).write_text(f"{MARK}\n")
        (home / ".cache/pip/wheels").mkdir(parents=True)
        (home / ".cache/pip/wheels/demo.txt").write_text("cached wheel\n")
        (home / ".m2/repository/org").mkdir(parents=True)
        (home / ".m2/repository/org/lib.pom").write_text("cached pom\n")
        (home / ".config/tool").mkdir(parents=True)
        (home / ".config/tool/settings.ini").write_text("shown by the user\n")
        (home / ".gitconfig").write_text(GITCONFIG)
        project = make_git_repo(base / "proj")
        git(project, "config", "http.https://github.com/.extraheader", f"AUTHORIZATION: basic {MARK}")
        yield home, project
    finally:
        shutil.rmtree(base, ignore_errors=True)


def executor(home: Path, project: Path, policy: Policy | None = None) -> BwrapExecutor:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}
    return BwrapExecutor(policy or load_policy("workspace-write"), project, env, output_limit=20000)


def test_credential_stores_and_the_rest_of_home_are_hidden_caches_are_not(home):
    home, project = home
    reads = " ".join(f"cat ~/{rel} 2>/dev/null;" for rel in STORES)
    result = executor(home, project).run(
        f"{reads} echo; cat ~/.cache/pip/wheels/demo.txt ~/.m2/repository/org/lib.pom; git config user.name; "
        "git config --list; cat .git/config ~/.gitconfig; python3 -c 'print(6*7)'", project, 60)
    assert MARK not in result.output
    assert "cached wheel" in result.output and "cached pom" in result.output
    assert "Me\n" in result.output and "alias.st=status" in result.output  # git's user config still works
    assert "42" in result.output  # a toolchain on PATH under the home still runs
    # nothing of the real files was touched
    assert MARK in (home / ".gitconfig").read_text() and MARK in (project / ".git/config").read_text()


def test_a_users_bind_back_of_a_parent_does_not_reopen_a_credential_store(home):
    home, project = home
    policy = load_policy("workspace-write")
    policy = dataclasses.replace(policy, home_visible=(*policy.home_visible, "~/.config", "~/.claude", "~"))
    result = executor(home, project, policy).run(
        "cat ~/.config/tool/settings.ini ~/.config/gh/hosts.yml ~/.config/github-copilot/apps.json "
        "~/.claude/.credentials.json ~/.netrc ~/notes/private.txt 2>&1", project, 30)
    assert "shown by the user" in result.output
    shown = [line for line in result.output.splitlines() if MARK in line]
    assert shown == [MARK]  # ~/notes (shown through "~") and nothing of the stores


def test_argv_hides_the_home_then_binds_back_then_covers_whole_list():
    policy = Policy("workspace-write", "test", project_writable=True, network=False)
    layout = Layout(project="/home/me/src/proj", cwd="/home/me/src/proj", read_only=("/home/me/src/proj/.git",),
                    hidden_dirs=("/home/me/.cargo/credentials",), homes=("/home/me",),
                    home_visible=("/home/me/.cache/pip", "/home/me/.cargo"),
                    covers=(("/tmp/scrub/0.config", "/home/me/.gitconfig"),))
    assert bwrap_argv(policy, layout, ["true"]) == [
        "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--unshare-net",
        "--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        "--tmpfs", "/home/me",
        "--ro-bind", "/home/me/.cache/pip", "/home/me/.cache/pip",
        "--ro-bind", "/home/me/.cargo", "/home/me/.cargo",
        "--bind", "/home/me/src/proj", "/home/me/src/proj",
        "--ro-bind", "/home/me/src/proj/.git", "/home/me/src/proj/.git",
        "--tmpfs", "/home/me/.cargo/credentials", "--remount-ro", "/home/me/.cargo/credentials",
        "--ro-bind", "/tmp/scrub/0.config", "/home/me/.gitconfig",
        "--chdir", "/home/me/src/proj", "--", "true",
    ]


def test_the_copy_of_gitconfig_keeps_identity_and_aliases_and_nothing_else():
    entries = [("user.name", "Me"), ("user.email", "me@example.invalid"), ("credential.helper", "store"),
               ("http.https://github.com/.extraheader", f"AUTHORIZATION: basic {MARK}"), ("alias.st", "status")]
    assert rebuild_config(entries) == '[user]\n\tname = "Me"\n\temail = "me@example.invalid"\n[alias]\n\tst = "status"\n'


def test_sandbox_show_is_the_users_alone(tmp_path):
    from clovercode.ground.config import load_config
    from clovercode.ground.errors import ConfigError
    from clovercode.sandboxing.ownpaths import policy_for, user_shown

    project = tmp_path / "p"
    project.mkdir()
    (project / "clovercode.toml").write_text('sandbox_show = ["~/.ssh"]\n')
    cfg = load_config(project, trust_project=True)  # not even a trusted project
    assert "~/.ssh" not in policy_for("workspace-write", cfg, os.environ, project).home_visible
    with pytest.raises(ConfigError, match="not a path under ~/"):
        user_shown({"sandbox_show": ["/etc"]})  # type: ignore[arg-type]


def test_the_interpreter_a_project_venv_was_made_from_comes_back_only_by_the_users_word(tmp_path):
    # pyvenv.cfg is the project's: it could name any directory of the home (see test_sandbox_home_allowlist.py)
    from clovercode.sandboxing.survey import survey

    home = Path(tempfile.mkdtemp(prefix="clovercode-home-", dir="/var/tmp"))
    try:
        python = home / "tools" / "py312" / "bin"
        python.mkdir(parents=True)
        project = tmp_path / "proj"
        (project / ".venv").mkdir(parents=True)
        (project / ".venv" / "pyvenv.cfg").write_text(f"home = {python}\ninclude-system-site-packages = false\n")
        env = {"HOME": str(home), "PATH": "/usr/bin"}
        layout = survey(load_policy("workspace-write"), project, project, env)
        assert str(home) in layout.homes and not any(p.startswith(str(home / "tools")) for p in layout.home_visible)
        policy = load_policy("workspace-write")
        shown = dataclasses.replace(policy, home_visible=(*policy.home_visible, "~/tools/py312"))
        assert str(home / "tools/py312") in survey(shown, project, project, env).home_visible
    finally:
        shutil.rmtree(home, ignore_errors=True)

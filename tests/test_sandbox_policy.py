"""Policy data → bwrap argv and environment: pure functions, compared as whole lists."""

import dataclasses
from pathlib import Path

import shutil

import pytest

from clovercode.ground.errors import SandboxUnavailable
from clovercode.sandboxing.argv import Layout, bwrap_argv, sandbox_env
from clovercode.sandboxing.policy import PROFILES, Policy, expand_patterns, load_policy, load_tool_refused
from clovercode.ground.resources import data_dir
from clovercode.sandboxing.survey import remove_created, survey

POLICY = Policy("workspace-write", "test", project_writable=True, network=False,
                env_allow=("PATH", "HOME", "LC_*", "MY_*"), env_deny=("*TOKEN*", "*_KEY"),
                env_set=(("TMPDIR", "/tmp"),))

LAYOUT = Layout(project="/work/proj", cwd="/work/proj/src", read_only=("/work/proj/.git",),
                hidden_dirs=("/root/.ssh",), hidden_files=("/etc/shadow",), masked=("/run",),
                exposed=("/run/systemd/resolve",))


def test_workspace_write_argv_whole_list():
    assert bwrap_argv(POLICY, LAYOUT, ["/bin/sh", "-c", "make test"]) == [
        "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--unshare-net",
        "--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        "--tmpfs", "/run",
        "--ro-bind", "/run/systemd/resolve", "/run/systemd/resolve",
        "--bind", "/work/proj", "/work/proj",
        "--ro-bind", "/work/proj/.git", "/work/proj/.git",
        "--tmpfs", "/root/.ssh", "--remount-ro", "/root/.ssh",
        "--ro-bind", "/dev/null", "/etc/shadow",
        "--chdir", "/work/proj/src", "--", "/bin/sh", "-c", "make test",
    ]


def test_read_only_network_profile_and_status_fd():
    policy = Policy("ro-net", "", project_writable=False, network=True)
    layout = Layout(project="/p", cwd="/p")
    assert bwrap_argv(policy, layout, ["true"], status_fd=7) == [
        "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        "--ro-bind", "/p", "/p",
        "--json-status-fd", "7", "--chdir", "/p", "--", "true",
    ]


def test_sandbox_env_is_an_allowlist_with_deny_patterns():
    host = {"PATH": "/usr/bin", "HOME": "/root", "LC_ALL": "C", "GITHUB_TOKEN": "t", "AWS_SECRET_ACCESS_KEY": "s",
            "MY_API_TOKEN": "x", "MY_VAR": "ok", "OPENAI_API_KEY": "k", "TMPDIR": "/var/tmp", "EDITOR": "vi"}
    assert sandbox_env(POLICY, host) == {"HOME": "/root", "LC_ALL": "C", "MY_VAR": "ok", "PATH": "/usr/bin",
                                         "TMPDIR": "/tmp"}


def test_sandbox_env_has_a_path_even_when_the_host_has_none():
    assert sandbox_env(POLICY, {})["PATH"] == "/usr/local/bin:/usr/bin:/bin"


@pytest.mark.parametrize("name", PROFILES)
def test_shipped_profiles_load(name):
    policy = load_policy(name)
    assert policy.name == name
    assert ".git" in policy.read_only and "~/.ssh" in policy.hidden and "/run" in policy.masked
    assert policy.network is (name == "workspace-write-network")
    assert policy.project_writable is (name != "read-only")
    assert ".git" in load_tool_refused()


def test_unknown_or_broken_policy_is_a_clear_error(tmp_path):
    with pytest.raises(SandboxUnavailable, match="unknown sandbox policy 'nope'"):
        load_policy("nope")
    for name in ("protected.toml", "secrets.toml", "environment.toml", "home.toml"):
        shutil.copy(data_dir("sandbox") / name, tmp_path / name)
    (tmp_path / "workspace-write.toml").write_text("project_writable = 'yes'\nnetwork = false\n")
    with pytest.raises(SandboxUnavailable, match="'project_writable' must be true or false"):
        load_policy("workspace-write", tmp_path)


def test_expand_patterns_per_home():
    assert expand_patterns(("~/.ssh", "/etc/shadow"), ("/root", "/home/ci")) == ("/root/.ssh", "/home/ci/.ssh", "/etc/shadow")


def test_survey_finds_protected_hidden_and_absent_paths(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".netrc").write_text("machine x password y\n")
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    (project / "clovercode.toml").write_text("")
    policy = Policy("t", "", True, False, read_only=(".git", "clovercode.toml", ".bashrc"),
                    hidden=("~/.ssh", "~/.netrc", "~/.aws"), masked=())
    layout = survey(policy, project, project, {"HOME": str(home)})
    # HOME sits under /tmp here, which the sandbox replaces anyway: nothing of it needs hiding.
    assert layout.read_only == (f"{project}/.git", f"{project}/clovercode.toml")
    assert layout.absent_protected == (f"{project}/.bashrc",)
    # A home outside the private /tmp is hidden whole; what is shown of it, less the secrets in it.
    outside = Path("/var/tmp") / f"clovercode-test-home-{tmp_path.name}"
    try:
        (outside / ".ssh").mkdir(parents=True)
        (outside / ".netrc").write_text("x")
        layout = survey(policy, project, project, {"HOME": str(outside)})
        assert str(outside) in layout.homes and f"{outside}/.ssh" in layout.hidden_dirs
        layout = survey(dataclasses.replace(policy, home_visible=("~",)), project, project, {"HOME": str(outside)})
        assert str(outside) in layout.home_visible
        assert f"{outside}/.ssh" in layout.hidden_dirs and f"{outside}/.netrc" in layout.hidden_files
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def test_survey_refuses_root_as_project(tmp_path):
    with pytest.raises(SandboxUnavailable, match="project directory is /"):
        survey(load_policy("workspace-write"), Path("/"), Path("/"), {})


def test_remove_created_only_touches_paths_absent_before(tmp_path):
    layout = Layout(str(tmp_path), str(tmp_path), absent_protected=(f"{tmp_path}/.bashrc", f"{tmp_path}/.vscode"))
    (tmp_path / ".vscode").mkdir()
    (tmp_path / ".vscode" / "tasks.json").write_text("{}")
    (tmp_path / "keep.txt").write_text("mine")
    assert remove_created(layout) == [".vscode"]
    assert not (tmp_path / ".vscode").exists() and (tmp_path / "keep.txt").exists()


def test_parents_of_nested_protected_paths_are_pinned(tmp_path):
    (tmp_path / ".config" / "fish").mkdir(parents=True)
    policy = Policy("t", "", True, False, read_only=(".git", ".config/fish"))
    layout = survey(policy, tmp_path, tmp_path, {})
    assert layout.read_only == (f"{tmp_path}/.config/fish",) and layout.pinned == (f"{tmp_path}/.config",)
    argv = bwrap_argv(POLICY, layout, ["true"])
    project = argv.index(str(tmp_path))
    assert argv[project + 2:project + 8] == ["--bind", f"{tmp_path}/.config", f"{tmp_path}/.config",
                                             "--ro-bind", f"{tmp_path}/.config/fish", f"{tmp_path}/.config/fish"]


def test_remove_created_never_deletes_through_a_symlinked_parent(tmp_path):
    project, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    (elsewhere / "fish").mkdir(parents=True)
    (elsewhere / "fish" / "config.fish").write_text("the user's own\n")
    project.mkdir()
    layout = Layout(str(project), str(project), absent_protected=(f"{project}/.config/fish",))
    (project / ".config").symlink_to(elsewhere)  # what a command could do
    assert remove_created(layout) == []
    assert (elsewhere / "fish" / "config.fish").read_text() == "the user's own\n"
    (project / ".config").unlink()
    (project / "cfg" / "fish").mkdir(parents=True)
    (project / ".config").symlink_to("cfg")  # inside the project: what it planted goes
    assert remove_created(layout) == ["cfg/fish"] and not (project / "cfg" / "fish").exists()

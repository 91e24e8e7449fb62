"""What of the hidden home comes back is decided by the user and the shipped list, never by the project:
real bubblewrap over a fake home (under /var/tmp, so the private /tmp is not what hides it) holding
marker secrets in places no credential list names. And the credential stores the environment moves
(KUBECONFIG, GH_CONFIG_DIR, …) are hidden wherever they point."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
from conftest import make_git_repo

from clovercode.executors.bwrap import BwrapExecutor
from clovercode.sandboxing.policy import load_policy
from clovercode.sandboxing.survey import survey

MARK = "marker-secret-5d1a"


@pytest.fixture
def world():
    base = Path(tempfile.mkdtemp(prefix="clovercode-homeallow-", dir="/var/tmp"))
    try:
        home = base / "home"
        for rel in (".config/other/secret", ".local/share/secret", ".cargo/config.toml", "src/other/.env"):
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            (home / rel).write_text(f"{MARK}\n")
        (home / ".config/x/bin").mkdir(parents=True)
        (home / ".local/bin").mkdir(parents=True)
        (home / ".local/bin/mytool").write_text("#!/bin/sh\necho mytool ran\n")
        (home / ".local/bin/mytool").chmod(0o755)
        (home / ".cargo/bin").mkdir(parents=True)
        project = make_git_repo(base / "proj")
        yield base, home, project
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(home: Path, project: Path, command: str, **env: str) -> str:
    host = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", **env}
    return BwrapExecutor(load_policy("workspace-write"), project, host, output_limit=20000).run(command, project, 60).output


def test_a_projects_pyvenv_cfg_brings_back_nothing_of_the_home(world):
    _, home, project = world
    (project / ".venv").mkdir()
    (project / ".venv/pyvenv.cfg").write_text(f"home = {home}/.config/x/bin\nversion = 3.12.0\n")
    (project / "venv").mkdir()
    (project / "venv/pyvenv.cfg").write_text(f"home = {home}/src/other\n")
    out = run(home, project, "cat ~/.config/other/secret ~/src/other/.env 2>&1; echo done",
              VIRTUAL_ENV=str(project / ".venv"))
    assert MARK not in out and "done" in out


def test_a_path_entry_under_the_home_comes_back_alone(world):
    _, home, project = world
    path = f"{home}/.local/bin:{home}/.cargo/bin:{os.environ['PATH']}"
    out = run(home, project, "mytool; cat ~/.local/share/secret ~/.cargo/config.toml 2>&1; echo done", PATH=path)
    assert "mytool ran" in out and "done" in out
    assert MARK not in out


def test_the_survey_binds_exact_paths_never_a_top_level_directory(world):
    _, home, project = world
    (project / ".venv").mkdir()
    (project / ".venv/pyvenv.cfg").write_text(f"home = {home}/.config/x/bin\n")
    env = {"HOME": str(home), "PATH": f"{home}/.cargo/bin:{home}/.ssh/bin:/usr/bin"}
    (home / ".ssh/bin").mkdir(parents=True)
    layout = survey(load_policy("workspace-write"), project, project, env)
    shown = set(layout.home_visible)
    assert str(home / ".cargo/bin") in shown
    assert not shown & {str(home / d) for d in (".config", ".cargo", ".local", ".ssh", ".ssh/bin", ".config/x")}
    assert all(p != str(home) for p in shown)


def test_credential_stores_the_environment_moves_are_hidden_wherever_they_point(world):
    base, home, project = world
    stores = base / "elsewhere"
    (stores / "gh").mkdir(parents=True)
    (stores / "gh/hosts.yml").write_text(f"{MARK} gh\n")
    for name in ("kube.yaml", "kube2.yaml", "aws-creds", "gcp.json", "token", "key.pem", "npmrc"):
        (stores / name).write_text(f"{MARK} {name}\n")
    env = {"KUBECONFIG": f"{stores}/kube.yaml:{stores}/kube2.yaml", "GH_CONFIG_DIR": str(stores / "gh"),
           "AWS_SHARED_CREDENTIALS_FILE": str(stores / "aws-creds"),
           "GOOGLE_APPLICATION_CREDENTIALS": str(stores / "gcp.json"),
           "SOMETOOL_TOKEN_FILE": str(stores / "token"), "DEPLOY_KEY_FILE": str(stores / "key.pem"),
           "NPM_CONFIG_USERCONFIG": str(stores / "npmrc")}
    agent = socket.socket(socket.AF_UNIX)  # an SSH agent outside /run and /tmp
    agent.bind(str(stores / "agent.sock"))
    agent.listen()
    env["SSH_AUTH_SOCK"] = str(stores / "agent.sock")
    probe = f"import socket; socket.socket(socket.AF_UNIX).connect('{stores}/agent.sock'); print('reached')"
    try:
        out = run(home, project, f"cat {stores}/* {stores}/gh/hosts.yml 2>&1; python3 -c \"{probe}\" 2>&1; echo done",
                  **env)
    finally:
        agent.close()
    assert MARK not in out and "done" in out and "reached" not in out
    (stores / "plain.txt").write_text("not a store\n")  # what no variable names stays readable
    assert "not a store" in run(home, project, f"cat {stores}/plain.txt", **env)


def test_which_variables_name_a_store():
    from clovercode.sandboxing.envstores import env_stores

    env = {"KUBECONFIG": "/a/k1:/a/k2", "GH_CONFIG_DIR": "/a/gh", "X_CREDENTIALS_PATH": "/a/x",
           "FOO_TOKEN_FILE": "/a/t", "BAR_KEY_FILE": "~/k", "NETRC": "/a/netrc", "SSH_AUTH_SOCK": "/a/agent.sock",
           "GIT_ASKPASS": "/a/askpass", "PATH": "/usr/bin", "EDITOR": "/usr/bin/vi", "HF_HOME": "/a/hf",
           "SOME_CONFIG_DIR": "relative/dir", "XDG_CONFIG_DIRS": "/etc/xdg", "SSL_CERT_FILE": "/etc/ssl/cert.pem"}
    found = env_stores(env, homes=("/h",))
    assert found == ("/a/k1", "/a/k2", "/a/gh", "/a/x", "/a/t", "/h/k", "/a/netrc", "/a/agent.sock", "/a/askpass",
                     "/a/hf/token", "/a/hf/stored_tokens")


def test_a_store_variable_never_hides_the_project_or_a_system_directory(world):
    _, home, project = world
    env = {"HOME": str(home), "PATH": "/usr/bin", "GH_CONFIG_DIR": str(project.parent), "EVIL_CONFIG_DIR": "/usr",
           "X_CREDENTIALS": "/"}
    layout = survey(load_policy("workspace-write"), project, project, env)
    assert not {"/usr", "/", str(project.parent)} & set(layout.hidden_dirs)


def test_a_store_a_variable_names_inside_the_project_is_hidden_and_refused_by_the_file_tools(world):
    from clovercode.actions.guards import FileGuard

    _, home, project = world
    creds = project / "gha-creds-1234.json"  # where google-github-actions/auth writes it: the workspace
    creds.write_text(f'{{"private_key": "{MARK}"}}\n')
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(creds), "HOME": str(home), "PATH": "/usr/bin"}
    assert MARK not in run(home, project, f"cat {creds.name} 2>&1; echo done", GOOGLE_APPLICATION_CREDENTIALS=str(creds))
    guard = FileGuard.from_policy_data(env, project)
    assert guard.is_secret(creds.resolve()) and not guard.is_secret((project / "app.py").resolve())
    # a variable naming the project (or a directory holding it) refuses nothing of it
    holding = FileGuard.from_policy_data({**env, "TOOL_CONFIG_DIR": str(project.parent)}, project)
    assert not holding.is_secret((project / "app.py").resolve())


def test_no_interpreter_prefix_in_the_home_comes_back_on_its_own(world, monkeypatch):
    # sys.base_prefix is read from a virtualenv's pyvenv.cfg: run from a project's .venv, the project names it
    import sys

    _, home, project = world
    for rel in (".local/bin", ".local/lib/python3.12", "py/venvs/tool/bin", "py/venvs/other"):
        (home / rel).mkdir(parents=True, exist_ok=True)
    (home / "py/venvs/tool/pyvenv.cfg").write_text("home = /usr/bin\n")
    monkeypatch.setattr(sys, "prefix", str(home / "py/venvs/tool"))
    monkeypatch.setattr(sys, "base_prefix", str(home / ".local"))
    monkeypatch.setattr(sys, "executable", str(home / "py/venvs/tool/bin/python"))
    env = {"HOME": str(home), "PATH": f"{home}/py/venvs/tool/bin:/usr/bin"}
    shown = set(survey(load_policy("workspace-write"), project, project, env).home_visible)
    assert str(home / "py/venvs/tool/bin") in shown  # the PATH entry, alone
    assert not {str(home / p) for p in (".local", "py", "py/venvs", "py/venvs/tool")} & shown

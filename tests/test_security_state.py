"""The sandbox hides clovercode's own state (issue 24): other projects' trajectories, histories, MCP
logs and tag caches, its config, a self-hosted CI runner's credentials; what clovercode writes for
itself is 0600 in 0700 directories whatever the umask. Real runs of the CLI (exec, the REPL in a pty)
and, where bubblewrap is installed, real sandboxed reads."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pexpect
import pytest

from clovercode.ground.config import load_config
from clovercode.ground.errors import ConfigError
from clovercode.sandboxing.ownpaths import hidden_paths, policy_for
from clovercode.sandboxing.survey import survey
from conftest import EXAMPLES, cli_env, make_git_repo, run_cli
from mcp_helpers import server_command
from pty_screen import PROMPT, spawn_repl
from test_parser_table import xml

CANARY = "canary-state-7c21"
SANDBOX = () if shutil.which("bwrap") else ("--sandbox", "none")


@pytest.fixture
def world():
    """A home outside /tmp (the sandbox's private /tmp would hide it anyway) with clovercode's state,
    cache and config written by "another project", and a self-hosted runner's credentials."""
    base = Path(tempfile.mkdtemp(prefix="clovercode-state-", dir="/var/tmp"))
    try:
        home = base / "home"
        env = {"HOME": str(home), "XDG_STATE_HOME": str(home / "st"), "XDG_CACHE_HOME": str(home / "ca"),
               "XDG_CONFIG_HOME": str(home / "co"), "PATH": os.environ["PATH"]}
        secrets = [home / "st/clovercode/trajectories/20260101-other-project.jsonl",
                   home / "st/clovercode/mcp-logs/github.log", home / "st/clovercode/history",
                   home / "ca/clovercode/tags/other-0123.sqlite", home / "co/clovercode/config.toml",
                   home / "actions-runner/.credentials", home / "actions-runner/.credentials_rsaparams",
                   home / "actions-runner/.runner", home / ".config/glab-cli/config.yml"]
        for path in secrets:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# {CANARY} {path.name}\n")  # a comment: config.toml must stay valid TOML
        project = make_git_repo(base / "proj", EXAMPLES / "calc")
        yield env, project, secrets
    finally:
        shutil.rmtree(base, ignore_errors=True)


def layout_for(project: Path, env: dict[str, str], **flags):
    cfg = load_config(project, env, flags)
    return survey(policy_for("workspace-write", cfg, env, project), project, project, env)


def test_the_sandbox_hides_clovercodes_state_cache_config_and_runner_credentials(world):
    env, project, _ = world
    home = env["HOME"]
    layout = layout_for(project, env)
    assert {f"{home}/st/clovercode", f"{home}/ca/clovercode", f"{home}/co/clovercode",
            f"{home}/.config/glab-cli"} <= set(layout.hidden_dirs)
    assert {f"{home}/actions-runner/.credentials", f"{home}/actions-runner/.credentials_rsaparams",
            f"{home}/actions-runner/.runner"} <= set(layout.hidden_files)
    assert f"{home}/actions-runner" not in layout.hidden_dirs  # the runner's own tools stay usable


def test_moved_state_is_hidden_where_it_went_and_the_user_may_hide_more(world, tmp_path):
    env, project, _ = world
    home = Path(env["HOME"])
    elsewhere, mine = home / "traj", home / "notes"
    elsewhere.mkdir()
    mine.mkdir()
    (home / "co/clovercode/config.toml").write_text(f'trajectory_dir = "{elsewhere}"\nsandbox_hide = ["~/notes"]\n')
    layout = layout_for(project, env)
    assert {str(elsewhere), str(mine)} <= set(layout.hidden_dirs)
    moved = {**env, "CLOVERCODE_HOME": str(home / "cchome")}
    (home / "cchome").mkdir()
    assert str(home / "cchome") in layout_for(project, moved).hidden_dirs


def test_only_the_user_sets_sandbox_hide(world):
    env, project, _ = world
    (project / "clovercode.toml").write_text('sandbox_hide = ["/etc/hostname"]\n')
    for trusted in (False, True):  # ignored with a note, even in a trusted project (trust/project.py)
        cfg = load_config(project, env, {}, trust_project=trusted)
        assert cfg["sandbox_hide"] == () and any("ignored sandbox_hide" in n for n in cfg.declared.notes)
    (project / "clovercode.toml").unlink()
    cfg = load_config(project, env, {"sandbox_hide": ["notes"]})
    with pytest.raises(ConfigError, match="neither absolute nor under ~/"):
        hidden_paths(cfg, env)


def test_state_holding_the_project_is_not_hidden(world):
    """A project kept inside clovercode's state (a checkout under CLOVERCODE_HOME) stays usable."""
    env, project, _ = world
    cfg = load_config(project, env, {})
    assert str(project.parent) not in hidden_paths(cfg, {**env, "CLOVERCODE_HOME": str(project.parent)}, project)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_sandboxed_command_reads_none_of_it(world):
    env, project, secrets = world
    files = " ".join(str(p) for p in secrets)
    proc = subprocess.run([sys.executable, "-m", "clovercode", "sandbox", "run", "--",
                           f"cat {files}; echo listing; ls -A {env['XDG_STATE_HOME']}/clovercode"],
                          cwd=project, env=cli_env(**env), capture_output=True, text=True, timeout=60)
    assert CANARY not in proc.stdout + proc.stderr
    assert proc.stdout.split("listing\n")[1] == ""  # not even the names of other projects' files


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_state_files_are_private_whatever_the_umask(tmp_path):
    """exec edits a project without git (directory checkpoints), maps it (tag cache), starts an MCP
    server (its log); the REPL keeps a history; a crash report and a saved rule: all 0600 in 0700."""
    home = Path(os.environ["HOME"])
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "clovercode" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"[mcp_servers.t]\n{server_command('good')}\n")
    project = Path(shutil.copytree(EXAMPLES / "calc", tmp_path / "calc"))
    turns = tmp_path / "turns.jsonl"
    turns.write_text("".join(json.dumps({"text": t}) + "\n" for t in [
        xml("view_file", path="calc.py"),
        xml("edit_file", path="calc.py", old_text="    return sum(values) // len(values)",
            new_text="    return sum(values) / len(values)"),
        xml("finish", summary="fixed")]))
    old = os.umask(0o022)
    try:
        proc = run_cli("exec", "--model", f"replay:{turns}", *SANDBOX, "fix mean", cwd=project,
                       env=cli_env(XDG_CACHE_HOME=str(home / ".cache")))
        assert proc.returncode == 0, proc.stderr
        child = spawn_repl(project, "--model", f"replay:{turns}", *SANDBOX)
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
        child.close()
        code = "from clovercode.front.cli import save_crash_report; save_crash_report('boom')"
        subprocess.run([sys.executable, "-c", code], env=cli_env(), check=True)
        from clovercode.front.repl.permissions import add_rule

        add_rule(os.environ, "git status")
    finally:
        os.umask(old)
    state = Path(os.environ["XDG_STATE_HOME"]) / "clovercode"
    cache = home / ".cache" / "clovercode"
    kinds = {"trajectories": state / "trajectories", "checkpoints": state / "checkpoints",
             "mcp-logs": state / "mcp-logs", "crashes": state / "crashes", "tags": cache / "tags"}
    for name, directory in kinds.items():
        assert directory.is_dir(), name
    files = [p for d in kinds.values() for p in d.rglob("*") if p.is_file()] + [state / "history", config]
    dirs = [state, cache, *kinds.values(), *(p for d in kinds.values() for p in d.rglob("*") if p.is_dir())]
    assert {name for name, d in kinds.items() if not any(d.rglob("*"))} == set()
    assert {str(p): oct(mode(p)) for p in files if mode(p) != 0o600} == {}
    assert {str(p): oct(mode(p)) for p in dirs if mode(p) != 0o700} == {}

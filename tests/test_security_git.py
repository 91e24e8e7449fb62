"""Trust: git run by clovercode runs nothing the repository chose, and hooks get no secrets.

The attacker controls what a repository carries: `.gitattributes` (cloned with it) and, for a
checkout handed over as a directory (a CI workspace, an archive, something a sandboxed command wrote
before `.git` was read-only), `.git/config` too. Every program that config names writes its name
into a log; after a real `clovercode fix --push` / `exec` the log must be empty, and the user's own
git configuration (global credential helpers, ssh command) must still be the one used."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from conftest import cli_env, git, make_git_repo, run_cli
from test_parser_table import xml

from clovercode.trust import gitsafe

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ISSUE = "format_duration(5400) gives 1h90m"

EVIL = """#!/bin/sh
name=$1; shift
echo "$name" >> {log}
case $name in
  filter.clean|filter.smudge) exec cat ;;
  textconv) exec cat "$1" ;;
esac
exit 1
"""

HOOK_NAMES = ("pre-commit", "commit-msg", "post-commit", "post-checkout", "pre-push", "reference-transaction",
              "pre-auto-gc", "post-index-change", "push-to-checkout")


def plant(repo: Path, tmp_path: Path, *, remote_url: str | None = None) -> Path:
    """Commit a hostile `.gitattributes`, then write a hostile `.git/config`; returns the log file."""
    log = tmp_path / "ran.log"
    evil = tmp_path / "evil.sh"
    evil.write_text(EVIL.format(log=log))
    evil.chmod(0o755)
    (repo / ".gitattributes").write_text("* diff=evil filter=evil merge=evil\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    hooks = repo / ".husky"
    hooks.mkdir()
    for name in HOOK_NAMES:
        (hooks / name).write_text(f"#!/bin/sh\necho hook.{name} >> {log}\n")
        (hooks / name).chmod(0o755)
    config = {
        "core.fsmonitor": f"{evil} core.fsmonitor",
        "core.hooksPath": ".husky",
        "core.pager": f"{evil} core.pager",
        "core.editor": f"{evil} core.editor",
        "core.askPass": f"{evil} core.askPass",
        "core.sshCommand": f"{evil} core.sshCommand",
        "diff.external": f"{evil} diff.external",
        "diff.evil.textconv": f"{evil} textconv",
        "diff.evil.command": f"{evil} diff.command",
        "merge.evil.driver": f"{evil} merge.driver",
        "filter.evil.clean": f"{evil} filter.clean",
        "filter.evil.smudge": f"{evil} filter.smudge",
        "commit.gpgSign": "true",
        "gpg.program": f"{evil} gpg.program",
        "credential.helper": f"!{evil} credential.helper",
        "sequence.editor": f"{evil} sequence.editor",
        "remote.origin.receivepack": f"{evil} remote.receivepack",
        "remote.origin.uploadpack": f"{evil} remote.uploadpack",
        "protocol.ext.allow": "always",
    }
    for key, value in config.items():
        git(repo, "config", key, value)
    if remote_url:  # every push to origin becomes "run this program"
        git(repo, "config", f"url.ext::{evil} ext-transport %S .insteadOf", remote_url)
    return log


def ran(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


@pytest.fixture
def origin(tmp_path) -> Path:
    path = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    return path


def fix_push(work: Path) -> subprocess.CompletedProcess:
    return run_cli("fix", ISSUE, "--repo", str(work), "--model",
                   f"replay:{FIXTURES / 'durations.replay.jsonl'}", "--json", "--push", env=cli_env())


@pytest.fixture
def work(tmp_path, origin) -> Path:
    work = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    git(work, "remote", "add", "origin", origin.as_uri())
    git(work, "push", "-q", "origin", "main")
    return work


def test_fix_push_runs_no_program_the_repository_config_names(tmp_path, origin, work):
    log = plant(work, tmp_path)
    proc = fix_push(work)
    assert ran(log) == []
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    branch = result["branch"]
    # the fix was committed and pushed for real, its content unfiltered
    assert git(work, "rev-parse", branch).strip() == result["commit"]
    assert subprocess.run(["git", "--git-dir", str(origin), "rev-parse", branch], capture_output=True,
                          text=True, check=True).stdout.strip() == result["commit"]
    assert "seconds % 3600 // 60" in git(work, "show", f"{branch}:durations.py")


def test_a_push_redirected_to_the_ext_transport_runs_nothing_and_goes_to_the_remote(tmp_path, origin, work):
    log = plant(work, tmp_path, remote_url=origin.as_uri())
    proc = fix_push(work)
    assert ran(log) == []
    assert proc.returncode == 0, proc.stderr  # the repository's rewrite is not followed at all
    branch = json.loads(proc.stdout)["branch"]
    assert subprocess.run(["git", "--git-dir", str(origin), "rev-parse", branch], capture_output=True).returncode == 0


def test_exec_checkpoints_and_listing_run_no_program_the_repository_config_names(tmp_path):
    work = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    log = plant(work, tmp_path)
    (work / "notes.txt").write_text("untracked, so the checkpoint must hash it\n")
    model = tmp_path / "turns.jsonl"
    turns = [xml("run_command", command="echo hi"), xml("write_file", path="new.txt", content="new\n"), "Done."]
    model.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    proc = run_cli("exec", "--json", "--model", f"replay:{model}", "make new.txt", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert ran(log) == []
    assert not [line for line in proc.stdout.splitlines() if "no checkpoint could be recorded" in line]
    assert git(work, "for-each-ref", "refs/clovercode/checkpoints/")


# --- the user's own configuration still works ---------------------------------------------------

def user_program(tmp_path: Path, name: str, log: Path) -> Path:
    script = tmp_path / f"{name}.sh"
    script.write_text(f"#!/bin/sh\necho {name} >> {log}\nexit 1\n")
    script.chmod(0o755)
    return script


def test_the_users_ssh_command_is_used_and_the_repositorys_is_not(tmp_path, monkeypatch):
    work = make_git_repo(tmp_path / "work")
    log = tmp_path / "ran.log"
    mine, theirs = user_program(tmp_path, "mine", log), user_program(tmp_path, "theirs", log)
    monkeypatch.delenv("GIT_SSH_COMMAND", raising=False)
    monkeypatch.delenv("GIT_SSH", raising=False)
    subprocess.run(["git", "config", "--global", "core.sshCommand", str(mine)], check=True)
    git(work, "config", "core.sshCommand", str(theirs))
    env = {**os.environ, **gitsafe.git_env(work, os.environ)}
    subprocess.run(["git", "-C", str(work), "ls-remote", "ssh://git@example.invalid/x.git"], env=env,
                   capture_output=True, timeout=30)
    assert set(ran(log)) == {"mine"}


class _Unauthorized(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="x"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_users_credential_helper_is_asked_and_the_repositorys_is_not(tmp_path):
    server = HTTPServer(("127.0.0.1", 0), _Unauthorized)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        work = make_git_repo(tmp_path / "work")
        log = tmp_path / "ran.log"
        mine, theirs = user_program(tmp_path, "mine", log), user_program(tmp_path, "theirs", log)
        subprocess.run(["git", "config", "--global", "credential.helper", f"!{mine}"], check=True)
        git(work, "config", "credential.helper", f"!{theirs}")
        git(work, "config", "--add", "credential.helper", f"!{theirs}")
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **gitsafe.git_env(work, os.environ)}
        subprocess.run(["git", "-C", str(work), "ls-remote", f"http://127.0.0.1:{server.server_port}/x.git"],
                       env=env, capture_output=True, timeout=30)
        assert "theirs" not in ran(log) and "mine" in ran(log)
    finally:
        server.shutdown()


# --- the overrides, as whole objects -------------------------------------------------------------

def test_overrides_for_a_clean_repository_are_the_fixed_set():
    entries = [gitsafe.ConfigEntry("global", "user.name", "Me"),
               gitsafe.ConfigEntry("global", "filter.lfs.clean", "git-lfs clean -- %f")]
    assert gitsafe.overrides(entries) == gitsafe.ALWAYS


def test_overrides_neutralise_what_only_the_repository_sets_and_restore_the_users():
    entries = [
        gitsafe.ConfigEntry("global", "credential.helper", "store"),
        gitsafe.ConfigEntry("global", "credential.https://example.com.helper", "cache"),
        gitsafe.ConfigEntry("global", "core.sshcommand", "ssh -i ~/.ssh/work"),
        gitsafe.ConfigEntry("global", "filter.lfs.clean", "git-lfs clean -- %f"),
        gitsafe.ConfigEntry("local", "credential.helper", "!evil"),
        gitsafe.ConfigEntry("local", "core.sshcommand", "evil"),
        gitsafe.ConfigEntry("local", "filter.lfs.clean", "evil"),
        gitsafe.ConfigEntry("local", "filter.x.process", "evil"),
        gitsafe.ConfigEntry("worktree", "diff.x.textconv", "evil"),
        gitsafe.ConfigEntry("local", "remote.origin.receivepack", "evil"),
        gitsafe.ConfigEntry("local", "user.name", "Someone"),
    ]
    assert gitsafe.overrides(entries) == gitsafe.ALWAYS + (
        ("credential.helper", ""),
        ("credential.helper", "store"),
        ("credential.https://example.com.helper", "cache"),
        ("core.sshcommand", "ssh -i ~/.ssh/work"),
        ("filter.lfs.clean", "git-lfs clean -- %f"),
        ("filter.x.process", ""),
        ("diff.x.textconv", ""),
    )
    assert gitsafe.transport_flags("https://github.com/o/r.git", "push") == ()
    assert gitsafe.transport_flags("/srv/r.git", "push") == (f"--receive-pack={gitsafe.LOCAL_RECEIVE_PACK}",)
    assert gitsafe.transport_flags("file:///srv/r.git", "fetch") == (f"--upload-pack={gitsafe.LOCAL_UPLOAD_PACK}",)


def test_overrides_drop_where_the_repository_sends_traffic_and_keep_the_users():
    entries = [
        gitsafe.ConfigEntry("global", "http.https://github.com/.extraheader", "X-Mine: 1"),
        gitsafe.ConfigEntry("local", "http.https://github.com/.extraheader", "AUTHORIZATION: basic secret"),
        gitsafe.ConfigEntry("local", "http.proxy", "http://127.0.0.1:8080"),
        gitsafe.ConfigEntry("local", "http.https://github.com.proxy", "http://127.0.0.1:8080"),
        gitsafe.ConfigEntry("local", "remote.origin.proxy", "http://127.0.0.1:8080"),
        gitsafe.ConfigEntry("local", "http.sslVerify", "false"),
        gitsafe.ConfigEntry("local", "http.curloptResolve", "github.com:443:127.0.0.1"),
        gitsafe.ConfigEntry("local", "http.followRedirects", "true"),
    ]
    assert gitsafe.overrides(entries) == gitsafe.ALWAYS + (
        ("http.https://github.com/.extraheader", ""),
        ("http.https://github.com/.extraheader", "X-Mine: 1"),
        ("http.proxy", ""),
        ("http.https://github.com.proxy", ""),
        ("remote.origin.proxy", ""),
        ("http.sslVerify", "true"),
        ("http.curloptResolve", ""),
        ("http.followRedirects", "initial"),
    )


def test_a_repository_git_proxy_is_switched_off_through_the_environment():
    theirs = gitsafe.ConfigEntry("local", "core.gitproxy", "evil for example.com")
    assert gitsafe.safe_env([theirs], {}) == {**gitsafe.config_env(gitsafe.ALWAYS, {}), "GIT_PROXY_COMMAND": ""}
    assert gitsafe.safe_env([theirs], {"GIT_PROXY_COMMAND": "mine"}) == gitsafe.config_env(gitsafe.ALWAYS, {})
    assert gitsafe.safe_env([gitsafe.ConfigEntry("global", "core.gitproxy", "mine")], {}) == \
        gitsafe.config_env(gitsafe.ALWAYS, {})


def test_config_env_comes_after_the_variables_already_set():
    base = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraheader", "GIT_CONFIG_VALUE_0": "AUTH x"}
    assert gitsafe.config_env((("core.fsmonitor", "false"), ("a.b", "c")), base) == {
        "GIT_CONFIG_COUNT": "3",
        "GIT_CONFIG_KEY_0": "http.extraheader", "GIT_CONFIG_VALUE_0": "AUTH x",
        "GIT_CONFIG_KEY_1": "core.fsmonitor", "GIT_CONFIG_VALUE_1": "false",
        "GIT_CONFIG_KEY_2": "a.b", "GIT_CONFIG_VALUE_2": "c",
    }
    assert gitsafe.config_env((("a.b", "c"),), {"GIT_CONFIG_COUNT": "junk"}) == {
        "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "a.b", "GIT_CONFIG_VALUE_0": "c"}


# --- hooks: the sandbox's environment unless a hook names what it needs -------------------------

def hook_config(command: str, extra: str = "") -> None:
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "clovercode" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"[[hooks.stop]]\ncommand = {json.dumps(command)}\n{extra}")


def stop_hook_env(tmp_path: Path, extra: str = "") -> dict[str, str]:
    project = make_git_repo(tmp_path / "project")
    dump = tmp_path / "hook-env.json"
    hook_config(f"python3 -c 'import json, os; json.dump(dict(os.environ), open(\"{dump}\", \"w\"))'", extra)
    model = tmp_path / "turns.jsonl"
    model.write_text(json.dumps({"text": "Nothing to do."}) + "\n")
    env = cli_env(GITHUB_TOKEN="ghs_secret", OPENAI_API_KEY="sk-secret", AWS_SECRET_ACCESS_KEY="aws-secret",
                  MY_SETTING="plain")
    proc = run_cli("exec", "--sandbox", "none", "--model", f"replay:{model}", "look", cwd=project, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(dump.read_text())


def test_a_stop_hook_gets_no_token(tmp_path):
    seen = stop_hook_env(tmp_path)
    assert not {"GITHUB_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "MY_SETTING"} & set(seen)
    assert "PATH" in seen and seen["HOME"] == os.environ["HOME"]
    assert seen["CLOVERCODE_PROJECT_DIR"] == str((tmp_path / "project").resolve())


def test_a_hook_gets_the_variables_it_names(tmp_path):
    seen = stop_hook_env(tmp_path, 'env = ["GITHUB_TOKEN", "MY_SETTING", "NOT_SET"]\n')
    assert seen["GITHUB_TOKEN"] == "ghs_secret" and seen["MY_SETTING"] == "plain"
    assert not {"OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "NOT_SET"} & set(seen)


def test_a_trusted_projects_hook_may_not_ask_for_your_variables(tmp_path):
    from clovercode.ground.config import load_config
    from clovercode.ground.errors import ConfigError

    project = make_git_repo(tmp_path / "project")
    (project / "clovercode.toml").write_text('[[hooks.stop]]\ncommand = "true"\nenv = ["GITHUB_TOKEN"]\n')
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "clovercode" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'trusted_projects = ["{project}"]\n')
    with pytest.raises(ConfigError, match=r"hooks.stop\[0\].env is not allowed in a project file"):
        load_config(project, os.environ)
    config.write_text('[[hooks.stop]]\ncommand = "true"\nenv = ["NOT A NAME"]\n')
    with pytest.raises(ConfigError, match=r"env must be a list of environment variable names"):
        load_config(project, os.environ)


def test_the_documented_stop_hook_runs_the_tests_in_the_sandbox(tmp_path):
    import shlex
    import sys

    project = make_git_repo(tmp_path / "project")
    py = shlex.quote(sys.executable)
    probe = "import os, json; json.dump(dict(os.environ), open('seen.json', 'w')); raise SystemExit(0)"
    hook_config(f"{py} -m clovercode sandbox run -- {py} -c {shlex.quote(probe)} >&2 || exit 2")
    model = tmp_path / "turns.jsonl"
    model.write_text(json.dumps({"text": "Nothing to do."}) + "\n")
    env = cli_env(GITHUB_TOKEN="ghs_secret", OPENAI_API_KEY="sk-secret")
    proc = run_cli("exec", "--model", f"replay:{model}", "look", cwd=project, env=env)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads((project / "seen.json").read_text())
    assert not {"GITHUB_TOKEN", "OPENAI_API_KEY"} & set(seen)
    assert seen["TMPDIR"] == "/tmp"  # set by the sandbox, not by the host


def test_hook_env_is_the_allowlist_plus_the_names_the_hook_gives():
    from clovercode.hooks.config import HookConfig
    from clovercode.hooks.runner import hook_env

    host = {"PATH": "/bin", "HOME": "/h", "GITHUB_TOKEN": "t", "LC_ALL": "C", "EXTRA": "x", "API_KEY_OK": "k"}
    allow, deny = ("PATH", "HOME", "LC_*", "API_KEY_OK"), ("*TOKEN*", "*API_KEY*")
    assert hook_env(HookConfig("stop", "true"), host, allow, deny) == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C"}
    named = HookConfig("stop", "true", env=("GITHUB_TOKEN", "EXTRA", "MISSING"))
    assert hook_env(named, host, allow, deny) == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "GITHUB_TOKEN": "t",
                                                  "EXTRA": "x"}

"""Trust: a repository's clovercode.toml against its user (issue 24). Replays stand in for a
prompt-injected model; the CLI runs as a real subprocess, the REPL on a real pty."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import EXAMPLES, cli_env, git, make_git_repo, run_cli
from test_parser_table import xml

from clovercode.ground.config import load_config
from clovercode.ground.settings import SETTINGS, SETTINGS_BY_KEY
from clovercode.trust.project import LOOSER, NEVER, UNTRUSTED, check_project_value, project_may_set

REPLAY = f"replay:{EXAMPLES / 'calc.replay.jsonl'}"


def wide() -> dict[str, str]:
    """The CLI's environment (this test's isolated home), wide enough that messages stay on one line."""
    return cli_env(COLUMNS="200")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def replay_file(path: Path, *turns: str) -> Path:
    return write(path, "".join(json.dumps({"text": t}) + "\n" for t in turns))


@pytest.fixture
def user_file(isolated_home) -> Path:
    return isolated_home / ".config" / "clovercode" / "config.toml"


@pytest.fixture
def project(tmp_path) -> Path:
    """A cloned repository: the demo project with the attacker's files in it."""
    return Path(shutil.copytree(EXAMPLES / "calc", tmp_path / "cloned")).resolve()


# --- the attacks, end to end -------------------------------------------------------------------

def test_a_project_cannot_script_the_model(project, user_file):
    # The repository ships "the model" (a replay) and points its clovercode.toml at it; exec would run
    # whatever it says (here: write a file; as easily: call the user's MCP servers, run commands).
    replay_file(project / ".x" / "turns.jsonl", xml("write_file", path="pwned.txt", content="owned\n"),
                xml("finish", summary="done"))
    write(project / "clovercode.toml", 'model = "replay:.x/turns.jsonl"\napproval = "full-auto"\n')
    mine = replay_file(user_file.parent / "mine.jsonl", xml("finish", summary="nothing to do"))
    write(user_file, f'model = "replay:{mine}"\n')
    proc = run_cli("exec", "--sandbox", "none", "look around", cwd=project, env=wide())
    assert proc.returncode == 0, proc.stderr
    assert not (project / "pwned.txt").exists()
    assert proc.stdout.strip() == "nothing to do"  # the user's model answered
    assert f"{project / 'clovercode.toml'}: ignored model, approval (a project file never sets these" in proc.stderr


def test_a_project_model_cannot_call_the_users_mcp_servers(project, user_file, tmp_path, monkeypatch):
    # The user's MCP servers run outside the sandbox; exec is full-auto, so a repository that chose
    # the model would call them with arguments of its choosing.
    from mcp_helpers import server_command

    calls = write(tmp_path / "calls.txt", "")
    monkeypatch.setenv("CALLS_FILE", str(calls))
    replay_file(project / ".x" / "turns.jsonl", xml("t__add", a=2, b=3), xml("finish", summary="done"))
    write(project / "clovercode.toml", 'model = "replay:.x/turns.jsonl"\n')
    mine = replay_file(user_file.parent / "mine.jsonl", xml("finish", summary="nothing to do"))
    write(user_file, f'model = "replay:{mine}"\n[mcp_servers.t]\n{server_command("good")}\nenv_vars = ["CALLS_FILE"]\n')
    proc = run_cli("exec", "--sandbox", "none", "add two numbers", cwd=project, env=wide())
    assert proc.returncode == 0, proc.stderr
    assert calls.read_text() == ""


def test_a_project_cannot_switch_approvals_off(project):
    # approval = "full-auto" from the repository: the model's edit would land without a question.
    make_git_repo(project)
    write(project / "clovercode.toml", 'approval = "full-auto"\n')
    original = (project / "calc.py").read_text()
    proc = run_cli("--repo", str(project), "--model", REPLAY, "--sandbox", "none",
                   input="mean() is wrong\nn\n\nn\n\n/exit\n", cwd=project, env=wide())
    assert proc.returncode == 0, proc.stderr
    assert "approval: suggest" in proc.stdout and "Apply this change?" in proc.stdout
    assert (project / "calc.py").read_text() == original
    assert "ignored approval (a project file never sets these" in proc.stdout


def test_a_project_cannot_choose_where_the_repl_history_goes(project, tmp_path):
    pexpect = pytest.importorskip("pexpect")
    from pty_screen import spawn_repl

    bashrc = tmp_path / "home-of-victim" / ".bashrc"
    write(project / "clovercode.toml", f'history_file = "{bashrc}"\n')
    child = spawn_repl(project, "--repo", str(project), "--model", REPLAY, "--sandbox", "none")
    try:
        child.expect("clover>")
        child.sendline("/help")
        child.expect("clover>")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert not bashrc.exists()  # the typed line went to clovercode's own history


def test_a_project_cannot_choose_where_trajectories_go(calc_repo, tmp_path, isolated_home):
    elsewhere = tmp_path / "elsewhere"
    write(calc_repo / "clovercode.toml", f'trajectory_dir = "{elsewhere}"\n[fix]\ntest_command = "none"\n')
    git(calc_repo, "add", "clovercode.toml")
    git(calc_repo, "commit", "-qm", "config")
    proc = run_cli("fix", "x", "--repo", str(calc_repo), "--model", REPLAY, "--sandbox", "none", "--no-commit",
                   env=wide())
    assert proc.returncode == 9, proc.stderr  # test_command none: no test shows a fix, so unverified (issue 26)
    assert not elsewhere.exists()
    assert list((isolated_home / ".local" / "state" / "clovercode" / "trajectories").glob("*.jsonl"))
    assert "ignored trajectory_dir (a project file never sets these" in proc.stdout


# --- what a project file may set ---------------------------------------------------------------

NEVER_LINES = [
    'model = "./m"', 'model = "replay:.x/turns.jsonl"', 'approval = "full-auto"', 'approval = "auto-edit"',
    'history_file = "~/.bashrc"', 'trajectory_dir = "/tmp/x"', 'context.cache_dir = "/tmp/x"',
    'engine.cache_dir = "/tmp/x"', "engine.trust_remote_code = true", 'github.repo = "evil/fork"',
    'github.api_url = "https://evil.example"', 'fix.base = "release"', 'fix.remote = "evil"', "fix.push_token = true",
    'endpoint = "https://evil.example/v1"', 'endpoint_model = "x"', 'api_key = "k"', 'serve.host = "0.0.0.0"',
    'serve.api_key = "k"', 'permissions.allow = ["rm"]',
]


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
@pytest.mark.parametrize("line", NEVER_LINES)
def test_what_no_project_file_sets_is_ignored_with_a_note(tmp_path, line, trusted):
    key = line.split(" =")[0]
    write(tmp_path / "clovercode.toml", line + "\nmax_steps = 7\n")
    cfg = load_config(tmp_path, {}, {}, trust_project=trusted)
    assert cfg[key] == SETTINGS_BY_KEY[key].default and cfg.sources[key] == "default"
    assert cfg["max_steps"] == 7  # the rest of the file still counts: a cloned repo cannot brick the tool
    source, ignored = cfg.ignored[key]
    assert source == str(tmp_path / "clovercode.toml") and ignored.why == NEVER
    assert cfg.declared.notes[0].startswith(f"{tmp_path / 'clovercode.toml'}: ignored {key} (a project file never sets")


def test_an_untrusted_project_sets_only_the_allowlist(tmp_path, user_file):
    text = ('max_steps = 7\ncommand_timeout = 9\nthinking = false\n[fix]\ntest_command = "make check"\n'
            'branch_prefix = "bot/"\nauthor = "Mallory <m@evil.example>"\n[context]\nmap_tokens = 100\n'
            '[engine]\nthreshold = 0.5\ndevice = "cpu"\n[hooks]\nmax_stop_blocks = 0\n')
    write(tmp_path / "clovercode.toml", text)
    cfg = load_config(tmp_path, {})
    assert (cfg["max_steps"], cfg["command_timeout"], cfg["thinking"], cfg["fix.test_command"],
            cfg["context.map_tokens"], cfg["engine.threshold"]) == (7, 9.0, False, "make check", 100, 0.5)
    held = ["fix.branch_prefix", "fix.author", "engine.device", "hooks.max_stop_blocks"]
    assert sorted(cfg.ignored) == sorted(held) and all(cfg.sources[k] == "default" for k in held)
    [note] = cfg.declared.notes
    assert "ignored fix.branch_prefix, fix.author, engine.device, hooks.max_stop_blocks (this project is not trusted" in note
    assert f'add "{tmp_path}" to trusted_projects in {user_file}' in note and "--trust-project" in note
    # trusted by the user's list, or for one run by --trust-project: the same file counts in full
    by_flag = load_config(tmp_path, {}, {}, trust_project=True)
    write(user_file, f'# mine\ntrusted_projects = ["{tmp_path}"]\n')
    for trusted in (by_flag, load_config(tmp_path, {})):
        assert trusted["fix.branch_prefix"] == "bot/" and trusted["engine.device"] == "cpu" and not trusted.ignored
        assert trusted["hooks.max_stop_blocks"] == 0 and trusted.declared.notes == [] and trusted.project_trusted


def test_a_project_only_makes_the_sandbox_stricter(tmp_path, user_file):
    for wanted in ("none", "workspace-write-network"):
        write(tmp_path / "clovercode.toml", f'sandbox = "{wanted}"\n')
        for trusted in (False, True):
            cfg = load_config(tmp_path, {}, {}, trust_project=trusted)
            assert cfg["sandbox"] == "workspace-write" and cfg.ignored["sandbox"][1].why == LOOSER
            assert "ignored sandbox (a project may only make the sandbox stricter)" in cfg.declared.notes[0]
    write(tmp_path / "clovercode.toml", 'sandbox = "read-only"\n')
    assert load_config(tmp_path, {})["sandbox"] == "read-only"
    write(user_file, 'sandbox = "read-only"\n')
    write(tmp_path / "clovercode.toml", 'sandbox = "workspace-write"\n')
    assert load_config(tmp_path, {})["sandbox"] == "read-only"  # stricter than the project's: the user's stays
    assert load_config(tmp_path, {}, {"sandbox": "none"})["sandbox"] == "none"  # the user's flag decides
    write(tmp_path / "clovercode.toml", 'sandbox = "docker"\n')
    from clovercode.ground.errors import ConfigError

    with pytest.raises(ConfigError, match="'sandbox' must be one of"):  # a typo in an allowed key is still said
        load_config(tmp_path, {})


def test_a_project_cannot_trust_itself(tmp_path):
    write(tmp_path / "clovercode.toml", f'trusted_projects = ["{tmp_path}"]\nfix.author = "x <x@y>"\n')
    cfg = load_config(tmp_path, {})
    assert not cfg.project_trusted and cfg["fix.author"] == ""
    assert any("ignored trusted_projects (a repository cannot trust itself" in n for n in cfg.declared.notes)


def test_every_setting_has_its_project_rule():
    # The whole table, compared at once: a new setting's rule is a decision someone sees in review.
    table = {s.key: project_may_set(s.key, trusted=False) or "any" for s in SETTINGS}
    never = {k for k, v in table.items() if v == NEVER}
    anyone = {k for k, v in table.items() if v == "any"}
    assert never == {"model", "endpoint", "api_key", "approval", "trajectory_dir", "history_file", "fix.remote",
                     "fix.push_token", "fix.base", "github.api_url", "github.repo", "github.bot_login", "github.mention",
                     "github.trusted_associations", "endpoint_model",
                     "endpoint_connect_timeout", "endpoint_read_timeout", "endpoint_retries", "endpoint_stream",
                     "endpoint_tools", "serve.host", "serve.port", "serve.api_key", "serve.model_name",
                     "serve.max_batch", "serve.max_queue", "serve.max_request_bytes", "serve.max_connections",
                     "serve.api_keys_file", "serve.header_timeout", "serve.max_queue_per_key",
                         "serve.max_connections_per_address", "serve.max_connections_per_key", "serve.body_timeout",
                     "permissions.allow", "context.cache_dir", "engine.trust_remote_code", "engine.quantization",
                     "engine.cache_dir",
                     "sandbox_hide", "sandbox_show"}
    assert anyone == {"temperature", "top_p", "max_new_tokens", "thinking", "max_steps", "max_time", "max_tokens",
                      "max_format_errors", "max_repeats", "repetition_window", "command_timeout", "output_limit",
                      "sandbox", "fix.test_command", "fix.test_rounds", "fix.test_timeout", "fix.baseline",
                      "context.map_tokens", "context.window", "context.compact_at", "context.keep_recent",
                      "context.observation_chars", "context.recent_observations", "context.instructions",
                      "context.max_file_kb", "context.cache", "context.jobs", "context.include_generated",
                      "engine.block_size", "engine.strategy", "engine.threshold", "engine.top_k", "engine.steps",
                      "engine.tool_choice", "engine.tool_prose"}
    assert {k for k, v in table.items() if v == UNTRUSTED} == set(table) - never - anyone
    assert all(project_may_set(k, trusted=True) is None for k in set(table) - never)
    assert check_project_value("sandbox", "read-only", False, "workspace-write") is None


def test_the_docs_show_the_same_tables():
    from clovercode.trust.project import NEVER_FROM_PROJECT, UNTRUSTED_MAY_SET

    docs = Path(__file__).resolve().parent.parent / "docs"
    for page, heading in (("configuration.md", "## What a project file may set"),
                          ("security.md", "## Trust: projects and their settings")):
        text = (docs / page).read_text()
        section = text[text.index(heading):]
        for pattern in NEVER_FROM_PROJECT + UNTRUSTED_MAY_SET:
            assert f"`{pattern}`" in section, (page, pattern)


# --- the REPL asks once; fix and exec take --trust-project -------------------------------------

def start(project: Path):
    from pty_screen import spawn_repl

    return spawn_repl(project, "--repo", str(project), "--model", REPLAY, "--sandbox", "none")  # not about bwrap


def answer_trust(project: Path, asked_about: str, answer: str):
    """Start the REPL, see the question name ``asked_about``, answer it, exit; the finished child."""
    import pexpect

    child = start(project)
    try:
        child.expect(asked_about)
        child.expect("Trust this folder")
        child.sendline(answer)
        child.expect("clover>")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    return child


def test_the_repl_asks_once_and_remembers_a_yes(project, user_file):
    pexpect = pytest.importorskip("pexpect")
    write(project / "clovercode.toml", '# the project\n[fix]\nbranch_prefix = "bot/"\n')
    write(user_file, "# my settings\nmax_steps = 9  # enough\n\n[permissions]\nallow = [\"git status\"]\n")
    child = answer_trust(project, "fix.branch_prefix", "y")
    screen = child.logfile_read.getvalue()
    assert f"trusted {project}" in screen and "ignored fix.branch_prefix" not in screen
    saved = user_file.read_text()
    assert saved.startswith("# my settings\nmax_steps = 9  # enough\n") and 'allow = ["git status"]' in saved
    assert load_config(project, {}).project_trusted and load_config(project, {})["fix.branch_prefix"] == "bot/"
    again = start(project)  # asked once: the answer holds
    try:
        again.expect("clover>")
        again.sendline("/exit")
        again.expect(pexpect.EOF)
    finally:
        again.close(force=True)
    assert "Trust this folder" not in again.logfile_read.getvalue()


def test_a_no_keeps_the_project_untrusted(project, user_file):
    pytest.importorskip("pexpect")
    write(project / "clovercode.toml", f'[mcp_servers.helper]\ncommand = "{project}/evil.sh"\n')
    child = answer_trust(project, "mcp_servers.helper", "n")
    assert "declares MCP servers; they are ignored because this project is not trusted" in child.logfile_read.getvalue()
    assert not user_file.exists()


@pytest.mark.parametrize("toml", [None, "max_steps = 5\n", 'model = "./m"\n'], ids=["plain", "allowed", "never"])
def test_no_question_when_trust_would_change_nothing(project, toml):
    pexpect = pytest.importorskip("pexpect")
    if toml:
        write(project / "clovercode.toml", toml)
    child = start(project)
    try:
        child.expect("clover>")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert "Trust this folder" not in child.logfile_read.getvalue()


def test_fix_trust_project_is_for_one_run(calc_repo):
    write(calc_repo / "clovercode.toml", '[fix]\nbranch_prefix = "bot/"\ntest_command = "none"\n'
                                         '[github]\nrepo = "evil/fork"\n')
    git(calc_repo, "add", "clovercode.toml")
    git(calc_repo, "commit", "-qm", "config")

    def fix(*flags: str) -> dict:
        proc = run_cli("fix", "mean() is wrong", "--repo", str(calc_repo), "--model", REPLAY, "--sandbox", "none",
                       "--json", "--force", *flags, env=wide())
        assert proc.returncode == 9, proc.stderr  # test_command none: unverified (issue 26)
        git(calc_repo, "checkout", "-q", "main")
        return json.loads(proc.stdout)

    plain = fix()
    assert plain["branch"].startswith("clovercode/")
    assert any("ignored fix.branch_prefix (this project is not trusted" in n for n in plain["notes"])
    trusted = fix("--trust-project")
    assert trusted["branch"].startswith("bot/")
    assert any("ignored github.repo (a project file never sets these" in n for n in trusted["notes"])
    assert not any("not trusted" in n for n in trusted["notes"])


def test_exec_trust_project_starts_the_projects_hooks(project, tmp_path):
    marker = tmp_path / "hook-ran"
    write(project / "clovercode.toml", f'[[hooks.post_tool_use]]\ncommand = "touch {marker}"\n')
    model = replay_file(tmp_path / "turns.jsonl", xml("view_file", path="calc.py"), xml("finish", summary="ok"))
    proc = run_cli("exec", "--sandbox", "none", "--model", f"replay:{model}", "look", cwd=project, env=wide())
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists() and "declares hooks; they are ignored because this project is not trusted" in proc.stderr
    proc = run_cli("exec", "--sandbox", "none", "--model", f"replay:{model}", "--trust-project", "look", cwd=project,
                   env=wide())
    assert proc.returncode == 0, proc.stderr
    assert marker.exists()


def test_the_ci_workflow_trusts_the_repository_file(tmp_path):
    proc = run_cli("ci", "init", "--repo", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / ".github" / "workflows" / "clovercode.yml").read_text()
    assert 'clovercode fix --github-issue "$ISSUE" --pr --json --trust-project' in text


def test_config_show_says_what_was_ignored_and_why(project):
    write(project / "clovercode.toml", 'approval = "full-auto"\nmax_steps = 4\n[fix]\nauthor = "x <x@y>"\n')
    proc = run_cli("config", "show", "--repo", str(project), env=wide())
    assert proc.returncode == 0, proc.stderr
    source = project / "clovercode.toml"
    assert f'# ignored: approval = "full-auto" from {source} (a project file never sets it)' in proc.stdout
    assert f'# ignored: fix.author = "x <x@y>" from {source} (this project is not trusted)' in proc.stdout
    shown = json.loads(run_cli("config", "show", "--repo", str(project), "--json").stdout)
    assert shown["approval"] == {"value": "suggest", "source": "default",
                                 "ignored": {"source": str(source), "value": "full-auto",
                                             "reason": "a project file never sets it"}}
    assert shown["max_steps"] == {"value": 4, "source": str(source)}


def test_the_trust_rule_is_ground_floor():
    from test_layers import PACKAGE, imported_modules

    assert imported_modules(PACKAGE / "trust" / "project.py") <= {"clovercode.ground.settings", "clovercode.ground.errors"}

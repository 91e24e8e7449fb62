"""Layered configuration: precedence, sources, and errors that name the file and key."""

from __future__ import annotations

import pytest

from clovercode.ground.config import load_config
from clovercode.ground.errors import ConfigError


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def user_file(isolated_home):
    return isolated_home / ".config" / "clovercode" / "config.toml"


def test_defaults(tmp_path):
    cfg = load_config(tmp_path, {})
    assert cfg["max_steps"] == 30 and cfg.sources["max_steps"] == "default"


def test_precedence_user_project_env_flag(tmp_path, user_file, isolated_home):
    write(user_file, "max_steps = 11\ntemperature = 0.5\ncommand_timeout = 9\nmax_time = 100\n")
    write(tmp_path / "clovercode.toml", "max_steps = 12\ntemperature = 0.6\ncommand_timeout = 8\n")
    env = {"HOME": str(isolated_home), "XDG_CONFIG_HOME": str(isolated_home / ".config"),
           "CLOVERCODE_MAX_STEPS": "13", "CLOVERCODE_TEMPERATURE": "0.7"}
    cfg = load_config(tmp_path, env, {"max_steps": 14})
    assert cfg["max_steps"] == 14 and cfg.sources["max_steps"] == "flag"
    assert cfg["temperature"] == 0.7 and cfg.sources["temperature"] == "env CLOVERCODE_TEMPERATURE"
    assert cfg["command_timeout"] == 8.0 and cfg.sources["command_timeout"] == str(tmp_path / "clovercode.toml")
    assert cfg["max_time"] == 100.0 and cfg.sources["max_time"] == str(user_file)


def test_nested_tables_map_to_dotted_keys(tmp_path):
    # A table for a key that is not a setting is still unknown, and the error names it dotted.
    write(tmp_path / "clovercode.toml", "[loop]\nmax_steps = 3\n")
    with pytest.raises(ConfigError, match=r"clovercode.toml: unknown setting 'loop.max_steps'"):
        load_config(tmp_path, {})


@pytest.mark.parametrize("text, message", [
    ("max_stepz = 3", "unknown setting 'max_stepz'"),
    ("max_steps = 'many'", "'max_steps' must be a whole number, got 'many'"),
    ("max_steps = 0", "'max_steps' must be at least 1, got 0"),
    ("max_steps = 2.5", "'max_steps' must be a whole number, got 2.5"),
    ("thinking = 'maybe'", "'thinking' must be true or false, got 'maybe'"),
    ("sandbox = 'yolo'", "'sandbox' must be one of read-only, workspace-write, workspace-write-network, none; got 'yolo'"),
    ("fix.test_command = 3", "'fix.test_command' must be a string, got 3"),
    ("max_steps = [", "not valid TOML"),
])
def test_project_file_errors_name_file_and_key(tmp_path, text, message):
    path = write(tmp_path / "clovercode.toml", text + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, {})
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)


def test_user_file_errors_name_the_user_file(tmp_path, user_file, isolated_home):
    write(user_file, "temperature = -1\n")
    env = {"HOME": str(isolated_home), "XDG_CONFIG_HOME": str(isolated_home / ".config")}
    with pytest.raises(ConfigError, match=f"^{user_file}: 'temperature' must be at least 0"):
        load_config(tmp_path, env)


def test_env_errors(tmp_path):
    with pytest.raises(ConfigError, match="env CLOVERCODE_MAX_STEPS: 'max_steps' must be a whole number"):
        load_config(tmp_path, {"CLOVERCODE_MAX_STEPS": "lots"})
    with pytest.raises(ConfigError, match="environment variable CLOVERCODE_MAX_STEP is not a clovercode setting"):
        load_config(tmp_path, {"CLOVERCODE_MAX_STEP": "3"})


def test_env_booleans(tmp_path):
    assert load_config(tmp_path, {"CLOVERCODE_THINKING": "off"})["thinking"] is False
    assert load_config(tmp_path, {"CLOVERCODE_THINKING": "YES"})["thinking"] is True


def test_flag_errors(tmp_path):
    with pytest.raises(ConfigError, match="--sandbox must be one of"):
        load_config(tmp_path, {}, {"sandbox": "docker"})


def test_project_file_may_not_weaken_the_sandbox(tmp_path, user_file, isolated_home):
    # Ignored with a note, not an error: a cloned repository must not brick the tool (docs/security.md).
    write(tmp_path / "clovercode.toml", 'sandbox = "none"\n')
    cfg = load_config(tmp_path, {})
    assert cfg["sandbox"] == "workspace-write" and "ignored sandbox" in cfg.declared.notes[0]
    write(user_file, 'sandbox = "workspace-write-network"\n')
    write(tmp_path / "clovercode.toml", 'sandbox = "read-only"\n')
    env = {"HOME": str(isolated_home), "XDG_CONFIG_HOME": str(isolated_home / ".config")}
    assert load_config(tmp_path, env)["sandbox"] == "read-only"
    (tmp_path / "clovercode.toml").unlink()
    assert load_config(tmp_path, env)["sandbox"] == "workspace-write-network"


@pytest.mark.parametrize("line", ['endpoint = "https://evil.example/v1"', 'api_key = "k"',
                                  'github.api_url = "https://evil.example"', "fix.push_token = true"])
def test_project_file_may_not_say_where_code_and_tokens_go(tmp_path, line):
    key = line.split(" =")[0]
    write(tmp_path / "clovercode.toml", line + "\n")
    cfg = load_config(tmp_path, {}, {}, trust_project=True)  # not even a trusted project
    assert cfg.sources[key] == "default" and f"ignored {key} (a project file never sets these" in cfg.declared.notes[0]
    assert load_config(None, {}) is not None  # the same key from the user file or env is fine


def test_a_missing_config_named_by_clovercode_config_is_an_error(tmp_path):
    # It used to fall back to the defaults silently: a typo'd path meant none of the user's settings.
    missing = tmp_path / "confg.toml"
    with pytest.raises(ConfigError, match=f"^CLOVERCODE_CONFIG names {missing}, which is not a file"):
        load_config(tmp_path, {"CLOVERCODE_CONFIG": str(missing)})
    write(missing, "max_steps = 5\n")
    assert load_config(tmp_path, {"CLOVERCODE_CONFIG": str(missing)})["max_steps"] == 5


def test_unknown_setting_suggests_the_closest_key(tmp_path):
    write(tmp_path / "clovercode.toml", "[fix]\ntest_comand = 'make check'\n")
    with pytest.raises(ConfigError, match="unknown setting 'fix.test_comand'; did you mean 'fix.test_command'"):
        load_config(tmp_path, {})


def test_project_file_hint_names_the_user_file_of_the_given_env(tmp_path, isolated_home):
    write(tmp_path / "clovercode.toml", 'fix.author = "x <x@y>"\n')
    other = tmp_path / "elsewhere.toml"
    write(other, "")
    cfg = load_config(tmp_path, {"CLOVERCODE_CONFIG": str(other)})
    assert f'add "{tmp_path}" to trusted_projects in {other}' in cfg.declared.notes[0]


@pytest.mark.parametrize("key, raw, message", [
    ("serve.port", "99999", "--port must be at most 65535, got 99999"),  # was an OverflowError crash in serve
    ("max_steps", "0", "--max-steps must be at least 1, got 0"),  # named as typed, not flag: 'max_steps'

])
def test_values_above_a_maximum_are_refused(tmp_path, key, raw, message):
    with pytest.raises(ConfigError, match=f"^{message}"):
        load_config(tmp_path, {}, {key: raw})
    assert load_config(tmp_path, {}, {key: "1"})[key] == 1

"""Layered configuration: defaults < user file < project file < CLOVERCODE_* env < flags.

Every value remembers where it came from, so ``clovercode config show`` can say why a setting has
the value it has. Unknown keys and bad values raise :class:`ConfigError` naming the source and key.
What the project file may set is decided by :mod:`clovercode.trust.project`; the rest of it is
ignored with a note (``declared.notes``) and kept in ``Config.ignored``.
"""

from __future__ import annotations

import difflib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from clovercode.wiring.declared import Declared, take_declarations
from clovercode.ground.errors import ConfigError
from clovercode.ground.settings import SETTINGS, SETTINGS_BY_KEY, Setting
from clovercode.trust.models import SETTING as TRUST_SETTING, parse_entries
from clovercode.trust.projectview import ProjectView
from clovercode.trust.project import Ignored, check_project_value, ignored_note, is_trusted

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROJECT_FILE = "clovercode.toml"
MAX_PROJECT_FILE_BYTES = 1 << 20  # a project's settings file; anything bigger is not a settings file
# Env vars that are about locating things, not settings themselves.
# CLOVERCODE_PROJECT_DIR is what hooks get: a hook that runs `clovercode sandbox run` passes it on
_NON_SETTING_ENV = {"CLOVERCODE_CONFIG", "CLOVERCODE_HOME", "CLOVERCODE_PROJECT_DIR"}


@dataclass
class Config:
    values: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)
    declared: Declared = field(default_factory=Declared)  # MCP servers, hooks (not settings)
    ignored: dict[str, tuple[str, Ignored]] = field(default_factory=dict)  # key -> (project file, why)
    project_trusted: bool = False

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def with_overrides(self, overrides: Mapping[str, Any], source: str = "flag") -> "Config":
        """A copy with ``overrides`` applied (``None`` values ignored), each checked like a flag."""
        values, sources = dict(self.values), dict(self.sources)
        for key, raw in overrides.items():
            if raw is None:
                continue
            values[key] = coerce_value(_setting(key, source), raw, source)
            sources[key] = source
        return Config(values, sources, self.declared, self.ignored, self.project_trusted)


def user_config_path(env: Mapping[str, str]) -> Path:
    if env.get("CLOVERCODE_CONFIG"):
        return Path(env["CLOVERCODE_CONFIG"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "clovercode" / "config.toml"


def state_dir(env: Mapping[str, str]) -> Path:
    """Where trajectories, history and checkpoints metadata live unless configured otherwise."""
    if env.get("CLOVERCODE_HOME"):
        return Path(env["CLOVERCODE_HOME"]).expanduser()
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME", "~")) / ".local" / "state")
    return Path(base).expanduser() / "clovercode"


def trajectory_dir(cfg: "Config", env: Mapping[str, str]) -> Path:
    """Where a session's trajectories go: ``trajectory_dir`` or the state directory's."""
    return Path(cfg["trajectory_dir"]).expanduser() if cfg["trajectory_dir"] else state_dir(env) / "trajectories"


def load_config(
    project_root: Path | None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    trust_project: bool = False,
) -> Config:
    """``trust_project``: the user trusts this project for this run (--trust-project), as if it were
    listed in ``trusted_projects``."""
    env = os.environ if env is None else env
    cfg = Config({s.key: s.default for s in SETTINGS}, {s.key: "default" for s in SETTINGS})
    user_file = user_config_path(env)
    if user_file.is_file():
        _apply_file(cfg, user_file, env, project=None)
    elif env.get("CLOVERCODE_CONFIG"):  # asked for by name: a typo must not fall back to the defaults
        raise ConfigError(f"CLOVERCODE_CONFIG names {user_file}, which is not a file",
                          hint="Point it at your config.toml, or unset it to use the default location.")
    if project_root is not None:
        cfg.project_trusted = trust_project or is_trusted(project_root, cfg.declared.trusted_projects)
        text = _project_text(cfg, project_root)
        if text is not None:
            _apply_file(cfg, project_root / PROJECT_FILE, env, project=project_root, text=text)
    _apply_env(cfg, env)
    return cfg.with_overrides(flags or {}, "flag")


def _setting(key: str, source: str) -> Setting:
    try:
        return SETTINGS_BY_KEY[key]
    except KeyError:
        close = difflib.get_close_matches(key, list(SETTINGS_BY_KEY), n=1, cutoff=0.6)
        raise ConfigError(
            f"{source}: unknown setting '{key}'" + (f"; did you mean '{close[0]}'?" if close else ""),
            hint="The settings are listed in docs/configuration.md and by `clovercode config show`.",
        ) from None


def coerce_value(setting: Setting, raw: Any, source: str) -> Any:
    """Turn a TOML/env/flag value into the setting's type, or raise a ConfigError naming it."""
    # A flag is named as it was typed (--max-steps), not by its setting key.
    where = f"--{setting.key.rsplit('.', 1)[-1].replace('_', '-')}" if source == "flag" else f"{source}: '{setting.key}'"
    value: Any
    if setting.key == TRUST_SETTING:  # names models; the old `true` is refused with the new form
        return parse_entries(raw, where)
    if setting.type is list:
        return _string_list(raw, where)
    if setting.type is bool:
        if isinstance(raw, bool):
            value = raw
        elif isinstance(raw, str) and raw.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            value = raw.strip().lower() in ("1", "true", "yes", "on")
        else:
            raise ConfigError(f"{where} must be true or false, got {raw!r}")
    elif setting.type in (int, float):
        if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
            raise ConfigError(f"{where} must be a number, got {raw!r}")
        try:
            value = setting.type(raw)
            if setting.type is int and isinstance(raw, float) and raw != int(raw):
                raise ValueError
        except ValueError:
            kind = "a whole number" if setting.type is int else "a number"
            raise ConfigError(f"{where} must be {kind}, got {raw!r}") from None
        if setting.minimum is not None and value < setting.minimum:
            raise ConfigError(f"{where} must be at least {setting.minimum:g}, got {value!r}")
        if setting.maximum is not None and value > setting.maximum:
            raise ConfigError(f"{where} must be at most {setting.maximum:g}, got {value!r}")
    else:
        if not isinstance(raw, str):
            raise ConfigError(f"{where} must be a string, got {raw!r}")
        value = raw
    if setting.choices is not None and value not in setting.choices:
        raise ConfigError(f"{where} must be one of {', '.join(setting.choices)}; got {value!r}")
    return value


def _string_list(raw: Any, where: str) -> tuple[str, ...]:
    """A list of non-empty strings; from the environment, a JSON array or one string."""
    if isinstance(raw, str):
        import json

        try:
            raw = json.loads(raw) if raw.lstrip().startswith("[") else [raw]
        except json.JSONDecodeError:
            raise ConfigError(f"{where} must be a JSON array of strings, got {raw!r}") from None
    if not isinstance(raw, (list, tuple)) or not all(isinstance(item, str) and item.strip() for item in raw):
        raise ConfigError(f"{where} must be a list of non-empty strings, got {raw!r}")
    return tuple(raw)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and dotted not in SETTINGS_BY_KEY:
            out.update(_flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _project_text(cfg: Config, root: Path) -> str | None:
    """The project's clovercode.toml, read through the project view like every project file: a link
    out of the project (``clovercode.toml -> ~/.config/x/config.toml``) is not parsed, and the
    person is told; None when there is none."""
    view = ProjectView(root)
    if not os.path.lexists(root / PROJECT_FILE):
        return None
    if view.kind(PROJECT_FILE) != "file":
        if view.find(PROJECT_FILE) is None:
            cfg.declared.notes.insert(0, f"{root / PROJECT_FILE} leads outside the project (a link); "
                                         "clovercode did not read it. Replace the link by the file itself.")
        return None
    try:
        data = view.read_bytes(PROJECT_FILE, MAX_PROJECT_FILE_BYTES)
    except OSError as exc:  # a link swapped in, a credential's shape: refused, not read
        raise ConfigError(f"{root / PROJECT_FILE}: cannot be read: {exc.strerror}") from None
    if len(data) > MAX_PROJECT_FILE_BYTES:
        raise ConfigError(f"{root / PROJECT_FILE}: larger than {MAX_PROJECT_FILE_BYTES >> 10} KiB; not read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{root / PROJECT_FILE}: not valid TOML: {exc}") from None


def _apply_file(cfg: Config, path: Path, env: Mapping[str, str], *, project: Path | None, text: str | None = None) -> None:
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8") if text is None else text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    table = take_declarations(cfg.declared, table, str(path), project, cfg.project_trusted, user_config_path(env))
    ignored: list[Ignored] = []
    for key, raw in _flatten(table).items():
        setting = _setting(key, str(path))  # a typo is an error in any file
        if project is not None:
            refused = check_project_value(key, raw, cfg.project_trusted, cfg.values.get(key))
            if refused is not None:  # ignored before its value is checked: a repository cannot brick the tool
                ignored.append(refused)
                cfg.ignored[key] = (str(path), refused)
                continue
        cfg.values[key] = coerce_value(setting, raw, str(path))
        cfg.sources[key] = str(path)
    if project is not None:
        note = ignored_note(str(path), ignored, project, user_config_path(env))
        if note:
            cfg.declared.notes.insert(0, note)


def _apply_env(cfg: Config, env: Mapping[str, str]) -> None:
    by_env = {s.env_var: s for s in SETTINGS}
    for name, raw in env.items():
        if not name.startswith("CLOVERCODE_") or name in _NON_SETTING_ENV:
            continue
        setting = by_env.get(name)
        if setting is None:
            raise ConfigError(
                f"environment variable {name} is not a clovercode setting",
                hint="Unset it, or see `clovercode config show` for the known CLOVERCODE_* names.",
            )
        cfg.values[setting.key] = coerce_value(setting, raw, f"env {name}")
        cfg.sources[setting.key] = f"env {name}"

"""Allow rules and trusted projects kept in the user's config file (``[permissions] allow = [...]``,
``trusted_projects``), edited with tomlkit so the rest of the file (comments, order, layout) stays as
the person wrote it; and /permissions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import tomlkit
from rich.markup import escape

from clovercode.actions.permissions import describe
from clovercode.ground.config import user_config_path
from clovercode.ground.errors import ConfigError
from clovercode.ground.privatefiles import private_dir, write_private
from clovercode.trust.terminal import revealed

if TYPE_CHECKING:
    from clovercode.front.repl.app import Repl


def _load(path: Path) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(path.read_text(encoding="utf-8")) if path.is_file() else tomlkit.document()
    except (OSError, tomlkit.exceptions.TOMLKitError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


def _save(path: Path, document: tomlkit.TOMLDocument) -> None:
    try:
        private_dir(path.parent, own=False)  # the user's config (it may hold an API key) stays theirs alone
        write_private(path, tomlkit.dumps(document))
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None


def saved_rules(env: Mapping[str, str]) -> list[str]:
    table = _load(user_config_path(env)).get("permissions", {})
    return [str(rule) for rule in table.get("allow", [])]


def add_rule(env: Mapping[str, str], prefix: str) -> Path:
    path = user_config_path(env)
    document = _load(path)
    table = document.get("permissions")
    if table is None:
        table = tomlkit.table()
        document["permissions"] = table
    rules = table.get("allow")
    if rules is None:
        table["allow"] = tomlkit.array()
        rules = table["allow"]
    if prefix not in [str(r) for r in rules]:
        rules.append(prefix)
    _save(path, document)
    return path


def remove_rule(env: Mapping[str, str], prefix: str) -> bool:
    path = user_config_path(env)
    document = _load(path)
    rules = document.get("permissions", {}).get("allow")
    if rules is None or prefix not in [str(r) for r in rules]:
        return False
    del rules[[str(r) for r in rules].index(prefix)]
    _save(path, document)
    return True


def permissions_command(repl: "Repl", arg: str) -> bool:
    """/permissions lists the allow rules; /permissions remove N|PREFIX deletes one."""
    approver, env, console = repl.approver, repl.session.env, repl.console
    path = user_config_path(env)
    action, _, target = arg.partition(" ")
    if action == "remove":
        target = target.strip()
        if target.isdigit() and 1 <= int(target) <= len(approver.rules):
            target = approver.rules[int(target) - 1]
        if target not in approver.rules:
            console.print(f"no rule {escape(target)!s}; /permissions lists them", highlight=False)
            return True
        approver.rules.remove(target)
        kept = "" if remove_rule(env, target) else " (for this session: it does not come from your config file)"
        console.print(f"removed the rule `{escape(target)}`{kept}", highlight=False)
        return True
    if action:
        console.print("usage: /permissions, or /permissions remove N|PREFIX", highlight=False)
        return True
    console.print(f"approval: {repl.approver.mode} · sandbox: {repl.cfg['sandbox']}", highlight=False, markup=False)
    if not approver.rules:
        console.print(f"no allow rules: answer 'a' at a command's approval to add one (kept in {path})", highlight=False,
                      markup=False)
        return True
    console.print(f"commands run without asking (rules in {path}; a rule ending in * is a prefix):", highlight=False,
                  markup=False)
    for number, rule in enumerate(approver.rules, 1):
        console.print(f"  {number}. {escape(revealed(rule, newlines=False))}  ({escape(describe(rule))})", highlight=False)
    console.print("[dim]/permissions remove N deletes one[/]", highlight=False)
    return True


def add_trusted_project(env: Mapping[str, str], project: Path) -> Path:
    """List ``project`` in the user config's ``trusted_projects`` (trust/project.py); return the file."""
    path = user_config_path(env)
    document = _load(path)
    listed = document.get("trusted_projects")
    if listed is None:
        document["trusted_projects"] = tomlkit.array()
        listed = document["trusted_projects"]
    if str(project) not in [str(p) for p in listed]:
        listed.append(str(project))
    _save(path, document)
    return path

"""``clovercode config show``: every setting, its value and the layer it came from; then what the
project's ``clovercode.toml`` asked for and did not get, and why (trust/project.py)."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from clovercode.ground.config import Config
from clovercode.ground.settings import SETTINGS
from clovercode.trust.project import reason_text


def _masked(key: str, value: Any) -> Any:
    return "***" if key.endswith("api_key") and value else value


def show_config(cfg: Config, as_json: bool, console: Console) -> None:
    shown = {s.key: _masked(s.key, cfg[s.key]) for s in SETTINGS}
    if as_json:
        out: dict[str, Any] = {key: {"value": value, "source": cfg.sources[key]} for key, value in shown.items()}
        for key, (source, ignored) in cfg.ignored.items():  # added to the setting's object: the shape stays
            out[key]["ignored"] = {"source": source, "value": _masked(key, ignored.value),
                                   "reason": reason_text(ignored.why)}
        typer.echo(json.dumps(out, indent=2))
        return
    for setting in SETTINGS:  # one line per setting, also when piped (grep, diff)
        console.print(f"[bold]{setting.key}[/] = {escape(json.dumps(shown[setting.key]))}  "
                      f"[dim]# {escape(cfg.sources[setting.key])} · {setting.env_var}[/]", highlight=False, soft_wrap=True)
    for key, (source, ignored) in cfg.ignored.items():  # comment lines: the output stays TOML-like
        value = json.dumps(_masked(key, ignored.value), ensure_ascii=True, default=str)
        console.print(f"# ignored: {key} = {value} from {source} ({reason_text(ignored.why)})",
                      highlight=False, markup=False, soft_wrap=True)
    for entry in cfg.declared.untrusted:  # a server's name is the repository's text: no control characters
        shown_entry = "".join(c if c.isprintable() else "?" for c in entry)
        console.print(f"# ignored: {shown_entry} (this project is not trusted)", highlight=False, markup=False,
                      soft_wrap=True)

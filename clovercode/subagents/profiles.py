"""Named subagents: Markdown files with a front matter (name, description, tools, model, budget) and
a body that is the subagent's prompt. The user's live in ``agents/`` next to the config file; a
project's in ``.clovercode/agents/``, read only when the project is trusted (a cloned repository must
not choose what a child may do), and then only files that resolve inside the project."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from clovercode.ground.config import user_config_path
from clovercode.trust.paths import inside_project

PROJECT_DIR = Path(".clovercode") / "agents"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
BUDGET_KEYS = {"steps": "max_steps", "tokens": "max_tokens", "time": "max_time"}
MAX_PROMPT = 20000  # characters of an agent's prompt that reach the child


@dataclass(frozen=True)
class AgentProfile:
    name: str
    description: str
    prompt: str
    source: str  # "user" | "project"
    path: Path
    tools: tuple[str, ...] | None = None  # None: the default read-only set
    model: str | None = None  # noted, not obeyed: children share the parent's model (docs/subagents.md)
    max_steps: int | None = None
    max_tokens: int | None = None
    max_time: float | None = None


def _number(raw: str, kind: type) -> int | float | None:
    try:
        value = kind(raw)
    except ValueError:
        return None
    return value if value > 0 else None


def parse_profile(path: Path, source: str, text: str) -> AgentProfile | str:
    """The profile in ``text``, or why it cannot be used (a note for the person)."""
    fields: dict[str, str] = {}
    body = text
    if text.startswith("---\n") and "\n---" in text[4:]:
        head, _, body = text[4:].partition("\n---")
        body = body.lstrip("-").lstrip("\n")
        for line in head.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip().lower()] = value.strip().strip("\"'")
    name = fields.get("name") or path.stem
    if not NAME.match(name):
        return f"agent file {path.name}: the name {name!r} is not a plain word (letters, digits, _ . -)"
    prompt = body.strip()[:MAX_PROMPT]
    if not prompt:
        return f"agent {name}: {path.name} has no prompt (the text after the front matter)"
    tools = None
    if fields.get("tools"):
        tools = tuple(t.strip() for t in fields["tools"].strip("[]").split(",") if t.strip().strip("\"'"))
        tools = tuple(t.strip("\"'") for t in tools)
    budget: dict[str, int | float | None] = {}
    for item in re.split(r"[,\s]+", fields.get("budget", "")):
        key, _, raw = item.partition("=")
        if key in BUDGET_KEYS:
            budget[BUDGET_KEYS[key]] = _number(raw, float if key == "time" else int)
    for key in BUDGET_KEYS.values():
        if key in fields:
            budget[key] = _number(fields[key], float if key == "max_time" else int)
    return AgentProfile(name, fields.get("description", "") or prompt.splitlines()[0][:80], prompt, source, path,
                        tools, fields.get("model") or None, **budget)  # type: ignore[arg-type]


def load_profiles(root: Path, env: Mapping[str, str], project_trusted: bool,
                  notes: list[str] | None = None) -> dict[str, AgentProfile]:
    """The user's agents, then the trusted project's (a project agent replaces a user one of the same name)."""
    found: dict[str, AgentProfile] = {}
    notes = notes if notes is not None else []
    places = [(user_config_path(env).parent / "agents", "user")]
    project_dir = root / PROJECT_DIR
    if project_trusted:
        places.append((project_dir, "project"))
    elif project_dir.is_dir() and any(project_dir.glob("*.md")):
        notes.append(f"subagents in {PROJECT_DIR.as_posix()}/ ignored: this project is not trusted")
    for directory, source in places:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.md")):
            resolved = inside_project(root, path) if source == "project" else path
            if resolved is None:
                notes.append(f"agent file {PROJECT_DIR.as_posix()}/{path.name} leads outside the project (a symlink): not read")
                continue
            try:
                text = resolved.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                notes.append(f"agent file {path}: cannot be read ({getattr(exc, 'strerror', None) or exc})")
                continue
            profile = parse_profile(path, source, text)
            if isinstance(profile, str):
                notes.append(profile)
            else:
                if source == "project" and profile.model:
                    notes.append(f"agent {profile.name}: a project file does not choose the model; it runs on the session's")
                found[profile.name] = profile
    return found

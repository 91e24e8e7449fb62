"""Slash commands in an editor: the ``available_commands_update`` a session starts with, and a prompt
that starts with ``/NAME``.

The built-ins are the REPL's that make sense beside an editor's own UI (it has its own session
list, diff view and mode picker): ``/compact``, ``/context`` and ``/init``. Custom commands are the
REPL's (front/repl/custom.py): the user's always, the project's only in a trusted project (a cloned
repository's prompt files are not offered as the user's commands). A custom command becomes the
task its file says; a built-in answers in the turn's message; any other ``/word`` is a task as typed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clovercode.ground.errors import CloverError

BUILTIN = {
    "compact": ("summarise the history now, keeping the goal, plan and edited files", None),
    "context": ("show how full the context window is", None),
    "init": ("write a starter AGENTS.md for this project", "--force to replace an existing one"),
}
EDITS = ("init",)  # built-ins that write a file: refused in the modes that change nothing


@dataclass(frozen=True)
class Slash:
    name: str
    argument: str


def parse(task: str) -> Slash | None:
    if not task.startswith("/") or task.startswith("//"):
        return None
    head, _, rest = task[1:].partition(" ")
    name = head.split("\n", 1)[0]
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        return None
    return Slash(name, (task[1 + len(name):]).strip())


def custom_commands(session: Any) -> dict[str, Any]:
    from clovercode.front.repl.custom import load_custom_commands

    found = load_custom_commands(session.root, session.env, set(BUILTIN))
    return {name: c for name, c in found.items() if c.source == "user" or session.cfg.project_trusted}


def available(custom: dict[str, Any]) -> list[dict[str, Any]]:
    """The AvailableCommand list: built-ins first, then the custom commands by name."""
    out: list[dict[str, Any]] = []
    for name, (description, hint) in BUILTIN.items():
        out.append({"name": name, "description": description, **({"input": {"hint": hint}} if hint else {})})
    for name in sorted(custom):
        out.append({"name": name, "description": custom[name].description or f"custom command ({custom[name].source})",
                    "input": {"hint": "what to add to the command's text"}})
    return out


def run_builtin(slash: Slash, session: Any, mode: str, changes_nothing: bool) -> str:
    """A built-in's answer (Markdown text for the editor). Runs off the event loop, between turns."""
    from clovercode.front.contextcmd import context_line, ensure_prompt

    if changes_nothing and slash.name in EDITS:
        return f"/{slash.name} writes a file, and this session is in {mode} mode: switch modes to run it."
    if slash.name == "init":
        from clovercode.context.starter import write_starter

        try:
            path = write_starter(session.root, force=slash.argument == "--force")
        except CloverError as exc:
            return f"{exc.message}" + (". Run `/init --force` to replace it." if "exists" in exc.message else "")
        return f"Wrote `{path.name}`: fill in the placeholders; every task puts it in the system prompt."
    prompt = ensure_prompt(session)
    if slash.name == "compact":
        if not session.conversation.messages:
            return "Nothing to compact: the conversation is empty."
        before, after = prompt.compact_now(session.conversation)
        if after >= before:
            return "Nothing to compact: the history is already as short as compaction makes it."
        return f"Compacted the history: {before} → {after} tokens."
    prompt.build(session.conversation)
    return context_line(session) or "Context: empty."


def usage(session: Any, counted: int | None = None) -> dict[str, Any] | None:
    """A ``usage_update``: the window the model counted in its last turn (``counted``) where the backend
    gave its count, else the prompt builder's, labelled estimated in ``_meta`` unless it was counted
    with the model's tokenizer; None before any prompt was built."""
    last = getattr(getattr(session, "prompt", None), "last", None)
    if last is None or not last.window:
        return None
    update: dict[str, Any] = {"sessionUpdate": "usage_update", "used": max(0, int(counted or last.used)),
                              "size": int(last.window)}
    if counted is None and not last.exact:
        update["_meta"] = {"clovercode": {"estimated": True}}
    return update


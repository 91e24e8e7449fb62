"""Input the REPL acts on before the model sees it: ``@path`` attaches a project file's content to
the message (within a budget, with a note when cut), ``!command`` runs a command in the sandbox and
puts its output into the conversation."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clovercode.actions.context import ToolError
from clovercode.actions.fileio import read_text
from clovercode.actions.guards import FileGuard, FileStamps
from clovercode.actions.paths import display, resolve_in_root
from clovercode.ground.messages import Message
from clovercode.context.tokens import estimate_tokens
from clovercode.trust.projectview import ProjectView

MENTION = re.compile(r"(?<![\w@])@([^\s@]+)")
ATTACH_WINDOW_SHARE = 4  # all attachments of one message together take at most 1/4 of the window
SHELL_TAG = "shell"


@dataclass
class Attached:
    shown: str
    lines: int
    kept: int  # lines attached; fewer than ``lines`` when cut
    tokens: int


@dataclass
class Expanded:
    text: str  # what the model receives
    attached: list[Attached] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # mentions that name no readable file


def expand_mentions(text: str, root: Path, budget: int, stamps: FileStamps | None = None,
                    guard: FileGuard | None = None) -> Expanded:
    """``text`` with the files it mentions as ``@path`` appended, each at most what is left of ``budget`` tokens."""
    out = Expanded(text)
    blocks: list[str] = []
    seen: set[str] = set()
    guard = guard or FileGuard.from_policy_data()
    view = ProjectView(root, guard.secrets)  # the attachment is read as the file tools read: beneath the root
    for match in MENTION.finditer(text):
        given = match.group(1).rstrip(".,;:!?)]}'\"")
        try:
            path = resolve_in_root(view, given, must_exist=True)
            shown = display(root, path)
            if shown in seen:
                continue
            seen.add(shown)
            guard.check_read(path, shown)
            content = read_text(view, path, shown)
        except ToolError as exc:
            out.problems.append(f"@{given}: {exc}")
            continue
        lines = content.text.splitlines()
        kept = fit_lines(lines, budget)
        body = "\n".join(lines[:kept])
        tokens = estimate_tokens(body)
        budget -= tokens
        note = ""
        if kept < len(lines):
            note = (f"\n[cut: lines 1-{kept} of {len(lines)} attached to stay within the context budget; "
                    f"view_file {shown} with start_line={kept + 1} for the rest]")
        elif stamps is not None:
            stamps.record(path, content.digest)  # the model has seen all of it: it may edit without view_file
        blocks.append(f'<attached path="{shown}" lines="{len(lines)}">\n{body}{note}\n</attached>')
        out.attached.append(Attached(shown, len(lines), kept, tokens))
    if blocks:
        out.text = text + "\n\n" + "\n\n".join(blocks)
    return out


def fit_lines(lines: list[str], budget: int) -> int:
    """How many leading ``lines`` fit in ``budget`` tokens (binary search on the estimate)."""
    if estimate_tokens("\n".join(lines)) <= budget:
        return len(lines)
    low, high = 0, len(lines)
    while low < high:
        middle = (low + high + 1) // 2
        if estimate_tokens("\n".join(lines[:middle])) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def attach_budget(session: Any) -> int:
    from clovercode.context.tokens import window_for

    return window_for(session.backend, session.cfg["context.window"]) // ATTACH_WINDOW_SHARE


def run_shell(session: Any, command: str) -> tuple[str, bool]:
    """Run ``command`` as the model's run_command would (same executor, sandbox, timeout and
    environment); the result also goes into the conversation, so the next task can refer to it."""
    result = session.executor.run(command, session.root, session.cfg["command_timeout"], session.command_env)
    text = result.describe()
    session.conversation.add(Message("user", f"I ran `{command}` in the project (sandbox: {session.executor.name}):\n{text}",
                                     tags=frozenset({SHELL_TAG})))
    return text, result.exit_code == 0 and not result.timed_out

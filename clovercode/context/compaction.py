"""Keeping a long history inside the window: old tool outputs are shortened first (head and tail);
past a share of the window the history is compacted. Compaction keeps the goal, the plan / todo
state, the latest content of the files being edited and the most recent turns verbatim, and
replaces everything else with a summary. (Instruction files live in the system prompt, which is
rebuilt every step, so they are never compacted away.)"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence

from clovercode.ground.messages import Message

GOAL, SUMMARY, PLAN, FILES, INSTRUCTIONS = "goal", "summary", "plan", "files", "instructions"
KEEP_TAGS = frozenset({GOAL, INSTRUCTIONS})  # messages kept verbatim wherever they are
EDIT_TOOLS = frozenset({"edit_file", "write_file", "apply_patch", "create_file"})
PLAN_TOOLS = frozenset({"todo", "todo_write", "update_plan", "plan", "update_todos"})
FILE_TAG = "file:"  # FILES messages remember their paths in tags, so a later compaction re-reads them
SUMMARY_HEADER = ("Summary of the earlier conversation (compacted to fit the context window; the goal, "
                  "the plan and the current content of the files being edited are kept in full):")
LINE_CHARS = 200

MessageCounter = Callable[[Message], int]
FileReader = Callable[[str], "str | None"]


@dataclass(frozen=True)
class CompactionBudget:
    recent: int  # tokens of most recent history kept verbatim
    summary: int  # tokens the summary may take
    files: int  # tokens the edited files' content may take


def head_tail(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else its head and tail around a note."""
    if len(text) <= limit:
        return text
    head = int(limit * 0.6)
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[… {omitted} characters omitted …]\n{text[-tail:]}"


def shorten_observations(messages: Sequence[Message], *, keep_recent: int, max_chars: int) -> list[Message]:
    """A view of ``messages`` in which tool outputs older than the last ``keep_recent`` keep only
    their head and tail. The conversation itself is not changed."""
    tool_positions = [i for i, m in enumerate(messages) if m.role == "tool"]
    old = set(tool_positions[:max(0, len(tool_positions) - keep_recent)])
    out = []
    for i, message in enumerate(messages):
        if i in old and len(message.content) > max_chars:
            message = replace(message, content=head_tail(message.content, max_chars))
        out.append(message)
    return out


def edited_paths(messages: Iterable[Message]) -> list[str]:
    """Files the conversation edited (or a FILES message carried over), most recently edited first."""
    order: dict[str, int] = {}
    for position, message in enumerate(messages):
        for tag in message.tags:
            if tag.startswith(FILE_TAG):
                order[tag[len(FILE_TAG):]] = position
        for call in message.tool_calls:
            if call.name in EDIT_TOOLS:
                for path in _call_paths(call.arguments):
                    order[path] = position
    return sorted(order, key=lambda p: -order[p])


def _call_paths(arguments: dict) -> list[str]:
    paths = [arguments["path"]] if isinstance(arguments.get("path"), str) else []
    patch = arguments.get("patch") or arguments.get("input")
    if isinstance(patch, str):  # apply_patch style: *** Update File: path
        for line in patch.splitlines():
            for marker in ("*** Update File:", "*** Add File:", "*** Move to:"):
                if line.startswith(marker):
                    paths.append(line[len(marker):].strip())
    return paths


def compact(messages: Sequence[Message], *, count: MessageCounter, budget: CompactionBudget,
            read_file: FileReader, text_tokens: Callable[[str], int]) -> list[Message]:
    """The compacted history: kept messages verbatim, one summary of the rest, the plan, the files."""
    start = _tail_start(messages, count, budget.recent)
    head, tail = list(messages[:start]), list(messages[start:])
    if not head:
        return list(messages)
    kept = [m for m in head if m.tags & KEEP_TAGS]
    out = list(kept)
    summary = summarise(head, budget.summary, text_tokens)
    if summary:
        out.append(Message("user", summary, tags=frozenset({SUMMARY})))
    plan = latest_plan(head)
    if plan is not None and not any(PLAN in m.tags or _is_plan_call(m) for m in tail):
        out.append(plan)
    files = files_message(edited_paths(messages), read_file, budget.files, text_tokens)
    if files is not None:
        out.append(files)
    return out + tail


def _tail_start(messages: Sequence[Message], count: MessageCounter, budget: int) -> int:
    """Where the verbatim tail begins: as early as ``budget`` allows, never on a tool result (its
    call would be summarised away) nor on a previous summary or files block, and never after the
    latest assistant turn: the model must see the results of what it just did."""
    used, start = 0, len(messages)
    for i in range(len(messages) - 1, -1, -1):
        used += count(messages[i])
        if used > budget:
            break
        if messages[i].role != "tool":
            start = i
    while start < len(messages) and (messages[start].role == "tool" or messages[start].tags & {SUMMARY, FILES}):
        start += 1
    if start == len(messages):  # the latest exchange alone is over budget: keep it anyway, shortened later
        start = next((i for i in range(len(messages) - 1, -1, -1)
                      if messages[i].role != "tool" and not messages[i].tags & {SUMMARY, FILES}), len(messages))
    return start


def summarise(head: Sequence[Message], budget: int, text_tokens: Callable[[str], int]) -> str:
    """One line per step of ``head`` (earlier summaries carried over), oldest lines dropped to fit."""
    lines: list[str] = []
    results = {m.tool_call_id: m for m in head if m.role == "tool" and m.tool_call_id}
    for message in head:
        if message.tags & KEEP_TAGS or FILES in message.tags:
            continue
        if SUMMARY in message.tags:
            lines.extend(line for line in message.content.splitlines()[1:] if line.strip())
        elif message.role == "user":
            lines.append(f"- user: {_first_line(message.content)}")
        elif message.role == "assistant":
            if message.content.strip():
                lines.append(f"- assistant: {_first_line(message.content)}")
            for call in message.tool_calls:
                result = results.get(call.id)
                outcome = "no result" if result is None else (
                    ("error: " if result.content.startswith("Error") else "ok: ") + _first_line(result.content))
                lines.append(f"- called {call.name}({_brief_args(call.arguments)}) → {outcome}")
    if not lines:
        return ""
    dropped = 0
    while lines and text_tokens("\n".join([SUMMARY_HEADER, *lines])) > budget:
        drop = max(1, len(lines) // 8)
        lines, dropped = lines[drop:], dropped + drop
    if dropped:
        lines.insert(0, f"- … {dropped} earlier lines of this summary omitted")
    return "\n".join([SUMMARY_HEADER, *lines])


def latest_plan(messages: Sequence[Message]) -> Message | None:
    """The newest plan / todo state: a message tagged ``plan`` or the newest call of a plan tool."""
    for message in reversed(messages):
        if PLAN in message.tags:
            return message
        if _is_plan_call(message):
            call = next(c for c in reversed(message.tool_calls) if c.name in PLAN_TOOLS)
            state = json.dumps(call.arguments, ensure_ascii=False, indent=1)
            return Message("user", f"Current plan (the latest {call.name} call, kept through compaction):\n{state}",
                           tags=frozenset({PLAN}))
    return None


def _is_plan_call(message: Message) -> bool:
    return any(call.name in PLAN_TOOLS for call in message.tool_calls)


def files_message(paths: list[str], read_file: FileReader, budget: int,
                  text_tokens: Callable[[str], int]) -> Message | None:
    """The current content of edited files, newest first, as long as the budget lasts."""
    if not paths:
        return None
    blocks: list[str] = []
    used, left_out = 0, []
    for path in paths:
        text = read_file(path)
        block = f"### {path}\n(deleted or unreadable)" if text is None else f"### {path}\n```\n{text.rstrip()}\n```"
        cost = text_tokens(block)
        if used + cost > budget:
            left_out.append(path)
            continue
        blocks.append(block)
        used += cost
    intro = "Current content of the files being edited (read from disk when the history was compacted):"
    parts = [intro, *blocks]
    if left_out:
        parts.append("Also edited, not shown to save space (view them again before editing): " + ", ".join(left_out))
    tags = frozenset({FILES, *(FILE_TAG + p for p in paths)})
    return Message("user", "\n\n".join(parts), tags=tags)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= LINE_CHARS else line[:LINE_CHARS - 1] + "…"
    return "(empty)"


def _brief_args(arguments: dict) -> str:
    parts = []
    for key, value in arguments.items():
        shown = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else json.dumps(value[:60] + ("…" if len(value) > 60 else ""), ensure_ascii=False)
        parts.append(f"{key}={shown}")
    text = ", ".join(parts)
    return text if len(text) <= 120 else text[:119] + "…"


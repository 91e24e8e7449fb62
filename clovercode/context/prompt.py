"""The prompt, assembled within the model's context window: system prompt, tool schemas, instruction
files, repository map, the task, then the history (shortened, compacted or squeezed to fit)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from clovercode.ground.events import EventSink
from clovercode.ground.messages import Message
from clovercode.ground.conversation import Conversation
from clovercode.context.compaction import (GOAL, KEEP_TAGS, CompactionBudget, compact, head_tail, shorten_observations)
from clovercode.context.instructions import InstructionFile, outside_note, read_instructions, render_instructions
from clovercode.context.tokens import MESSAGE_OVERHEAD, TokenCounter
from clovercode.ground.errors import ConfigError
from clovercode.ground.taskinput import cut_middle
from clovercode.trust.projectview import ProjectView

ESTIMATE_MARGIN = 0.03  # share of the window left free when tokens are estimated rather than counted
MAX_READ_BYTES = 1024 * 1024
# Called every step with the conversation so far → (map text, files it focused on); it rebuilds the
# map only when the tree changed (context/refresh.py).
MapLoader = Callable[[list[Message]], "tuple[str, set[str]]"]
MAP_HEADER = ("# Repository map\nThe project's most used definitions, ranked for this task (file, then "
              "line: signature). It is an outline, not the code: view a file before changing it.")


@dataclass(frozen=True)
class Budget:
    window: int
    reserve: int  # tokens kept free for the model's reply
    compact_at: float
    keep_recent: float
    observation_chars: int
    recent_observations: int

    @staticmethod
    def from_config(cfg: Any, window: int, max_new_tokens: int) -> "Budget":
        compact_at, keep_recent = cfg["context.compact_at"], cfg["context.keep_recent"]
        if compact_at > 1:
            raise ConfigError(f"'context.compact_at' is a share of the window and must be at most 1, got {compact_at}")
        if keep_recent >= compact_at:
            raise ConfigError(f"'context.keep_recent' ({keep_recent}) must be smaller than 'context.compact_at' ({compact_at})",
                              hint="Compaction keeps that share of recent history; it has to leave room below the threshold.")
        return Budget(window, min(max_new_tokens, window // 4), compact_at, keep_recent,
                      cfg["context.observation_chars"], cfg["context.recent_observations"])


@dataclass
class PromptStats:
    """How the last prompt used the window."""

    window: int
    reserve: int
    system: int  # includes instructions and the map
    instructions: int
    repo_map: int
    tools: int
    history: int
    messages: int
    compactions: int
    exact: bool  # counted with the model's tokenizer (else estimated)

    @property
    def used(self) -> int:
        return self.system + self.tools + self.history

    @property
    def fullness(self) -> float:
        return self.used / self.window if self.window else 0.0

    def line(self) -> str:
        how = "" if self.exact else " (estimated)"
        compacted = f" · compacted {self.compactions}×" if self.compactions else ""
        return (f"context {self.fullness:.0%}: {_k(self.used)}/{_k(self.window)} tokens{how} — system {_k(self.system)}"
                f" (AGENTS.md {_k(self.instructions)}, map {_k(self.repo_map)}), tools {_k(self.tools)}, "
                f"history {_k(self.history)} in {self.messages} message{'' if self.messages == 1 else 's'}{compacted}")


def _k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}k" if tokens >= 1000 else str(tokens)


class ContextPrompt:
    """A PromptBuilder that fits the window. It compacts ``conversation`` in place when the history
    passes ``compact_at`` of the window; everything else only changes the returned view."""

    def __init__(self, *, root: Path, base_system: str, repo_map: str | MapLoader, tools_tokens: int,
                 count: TokenCounter, exact: bool, budget: Budget, touched: Iterable[str] = (),
                 instructions: bool = True, sink: EventSink | None = None):
        # A loader is first called at the first build, inside the run (after its run_start event).
        self._map_loader = None if isinstance(repo_map, str) else repo_map
        self.root, self.base_system = root, base_system
        self.repo_map = repo_map if isinstance(repo_map, str) else ""
        self.tools_tokens, self.count, self.exact, self.budget = tools_tokens, count, exact, budget
        self.touched = set(touched)
        self.use_instructions = instructions
        self.sink = sink
        self.compactions = 0
        self._refused_noted: set[str] = set()  # instruction files that lead outside, said once each
        self.last: PromptStats | None = None
        self._counts: dict[str, int] = {}

    # -- counting ---------------------------------------------------------------------------
    def text_tokens(self, text: str) -> int:
        if len(text) < 64:
            return self.count(text)
        cached = self._counts.get(text)
        if cached is None:
            if len(self._counts) > 20000:
                self._counts.clear()
            cached = self._counts[text] = self.count(text)
        return cached

    def message_tokens(self, message: Message) -> int:
        total = MESSAGE_OVERHEAD + self.text_tokens(message.content)
        if message.reasoning:
            total += self.text_tokens(message.reasoning)
        for call in message.tool_calls:
            total += self.text_tokens(call.name + json.dumps(call.arguments, ensure_ascii=False))
        return total

    @property
    def limit(self) -> int:
        """Tokens the prompt may take: the window less the reply's reserve (and a margin when estimating)."""
        margin = 0 if self.exact else int(self.budget.window * ESTIMATE_MARGIN)
        return self.budget.window - self.budget.reserve - margin

    # -- assembly ---------------------------------------------------------------------------
    def system_parts(self, conversation: Conversation, with_map: bool = True) -> tuple[str, int, int]:
        """The system text, and the tokens of its instructions and map parts."""
        parts = [self.base_system.rstrip()]
        instructions_tokens = map_tokens = 0
        if self.use_instructions:
            files = read_instructions(self.root, self.touched | touched_paths(conversation.messages))
            self._note_refused(files)
            text = render_instructions(files)
            if text:
                parts.append(text)
                instructions_tokens = self.text_tokens(text)
        if with_map and self.repo_map:
            section = f"{MAP_HEADER}\n{self.repo_map.rstrip()}"
            parts.append(section)
            map_tokens = self.text_tokens(section)
        return "\n\n".join(parts), instructions_tokens, map_tokens

    def _note_refused(self, files: list[InstructionFile]) -> None:
        for item in files:
            if item.refused and item.rel not in self._refused_noted and self.sink is not None:
                self._refused_noted.add(item.rel)
                self.sink.emit("warning", text=outside_note(item.rel), category="context")

    def build(self, conversation: Conversation) -> list[Message]:
        if self._map_loader is not None:
            if hasattr(self._map_loader, "sink"):  # report where the prompt reports now: a finished task's
                self._map_loader.sink = self.sink  # trajectory is closed (fix's follow-up rounds, /context)
            self.repo_map, focus = self._map_loader(conversation.messages)
            self.touched |= focus
        system, instructions_tokens, map_tokens = self.system_parts(conversation)
        system_tokens = self.text_tokens(system) + MESSAGE_OVERHEAD
        if map_tokens and system_tokens + self.tools_tokens > self.limit // 2:
            system, instructions_tokens, map_tokens = self.system_parts(conversation, with_map=False)
            system_tokens = self.text_tokens(system) + MESSAGE_OVERHEAD
        fixed = system_tokens + self.tools_tokens
        self._warn_overfull(fixed, system_tokens, instructions_tokens)
        self._fit_goal(conversation, fixed)
        view = self.view(conversation.messages)
        history = sum(self.message_tokens(m) for m in view)
        if fixed + history + self.budget.reserve > self.budget.compact_at * self.budget.window:
            if self._compact(conversation, fixed, history):
                view = self.view(conversation.messages)
                history = sum(self.message_tokens(m) for m in view)
        if fixed + history > self.limit:
            view = self.squeeze(view, self.limit - fixed)
            history = sum(self.message_tokens(m) for m in view)
        self.last = PromptStats(self.budget.window, self.budget.reserve, system_tokens, instructions_tokens, map_tokens,
                                self.tools_tokens, history, len(view), self.compactions, self.exact)
        return [Message("system", system), *view]

    def _warn_overfull(self, fixed: int, system_tokens: int, instructions_tokens: int) -> None:
        """Once, before the turn: the tool schemas and instructions alone leave no room for the task
        (clover-tiny's tools were 129 % of its window, and the first sign was a turn that went wrong)."""
        if fixed <= self.limit or self.sink is None or getattr(self, "_overfull_said", False):
            return
        self._overfull_said = True
        parts = sorted([(self.tools_tokens, "the tool schemas (fewer MCP servers, or a read-only mode, offer fewer tools)"),
                        (instructions_tokens, "AGENTS.md (shorten it, or context.instructions = false)"),
                        (system_tokens - instructions_tokens, "the system prompt and repository map")], reverse=True)
        named = "; ".join(f"{what}: {tokens:,} tokens" for tokens, what in parts if tokens > 0)
        self.sink.emit("warning", category="context", text=(
            f"the prompt's fixed part alone is {fixed:,} tokens, {fixed / self.budget.window:.0%} of the model's "
            f"{self.budget.window:,}-token window, before any task: the model will not see all of it. Largest first — "
            f"{named}. A model with a larger window avoids it."))

    def view(self, messages: list[Message]) -> list[Message]:
        return shorten_observations(messages, keep_recent=self.budget.recent_observations,
                                    max_chars=self.budget.observation_chars)

    def compact_now(self, conversation: Conversation) -> tuple[int, int]:
        """Compact on demand (``/compact``); returns history tokens before and after."""
        self.build(conversation)
        before = self.last.history if self.last else 0
        system_tokens = self.last.system if self.last else 0
        self._compact(conversation, system_tokens + self.tools_tokens, before, forced=True)
        self.build(conversation)
        return before, self.last.history if self.last else 0

    def _fit_goal(self, conversation: Conversation, fixed: int) -> None:
        """The window half of the task rule (taskinput.py): a task may take at most half the room the
        system prompt, tools and reply reserve leave, so the model still has room to work. A longer one
        is cut in the middle — in the conversation itself, once, with a note in the text and a warning."""
        room = (self.limit - fixed) // 2
        for index, message in enumerate(conversation.messages):
            if GOAL not in message.tags or room <= 0:
                continue
            tokens = self.message_tokens(message)
            if tokens <= room:
                continue
            keep = max(200, int(len(message.content) * (room - MESSAGE_OVERHEAD) / tokens * 0.9))
            cut = cut_middle(message.content, keep)
            conversation.messages[index] = _with_content(message, cut)
            if self.sink is not None:
                self.sink.emit("warning", category="context", text=(
                    f"the task is about {tokens:,} tokens, more than the {room:,} it may take of this model's "
                    f"{self.budget.window:,}-token context window: its middle ({len(message.content) - len(cut):,} "
                    "characters) was cut, with a note where. Shorten the task to keep all of it."))

    def _compact(self, conversation: Conversation, fixed: int, history: int, forced: bool = False) -> bool:
        room = max(0, int(self.budget.compact_at * self.budget.window) - self.budget.reserve - fixed)
        recent = int(min(self.budget.keep_recent * self.budget.window, 0.4 * room))
        if forced:
            recent = min(recent, history // 3)
        budget = CompactionBudget(recent=recent, summary=max(200, room // 10), files=room // 4)
        compacted = compact(conversation.messages, count=self.message_tokens, budget=budget,
                            read_file=self.read_file, text_tokens=self.text_tokens)
        if compacted == conversation.messages:
            return False
        after = sum(self.message_tokens(m) for m in self.view(compacted))
        if after >= history:  # the summary and the files it re-reads can outweigh what they replace
            return False
        conversation.messages[:] = compacted
        self.compactions += 1
        if self.sink is not None:
            self.sink.emit("context", action="compacted", before=history, after=after, forced=forced,
                           messages=len(compacted))
        return True

    def squeeze(self, view: list[Message], space: int) -> list[Message]:
        """Last resort when even the compacted history does not fit: shorten every tool output, then
        the longest messages, then drop the oldest messages that are not the goal."""
        view = shorten_observations(view, keep_recent=0, max_chars=max(200, self.budget.observation_chars // 4))
        for _ in range(32):
            sizes = [self.message_tokens(m) for m in view]
            if sum(sizes) <= space:
                return view
            largest = max(range(len(view)), key=sizes.__getitem__)
            if len(view[largest].content) <= 400:
                break
            view[largest] = _with_content(view[largest], head_tail(view[largest].content, len(view[largest].content) // 2))
        while view and sum(self.message_tokens(m) for m in view) > space:
            droppable = next((i for i, m in enumerate(view) if not m.tags & KEEP_TAGS), None)
            if droppable is None:
                break
            del view[droppable]
            view = [m for i, m in enumerate(view) if not (m.role == "tool" and _orphan(view, i))]
        return view

    def read_file(self, rel: str) -> str | None:
        view = ProjectView(self.root)  # beneath the root: a link out is neither followed nor read
        try:
            if view.stat(rel).st_size > MAX_READ_BYTES:
                return None
            return view.read_bytes(rel, MAX_READ_BYTES).decode("utf-8", errors="replace")
        except OSError:
            return None


def _with_content(message: Message, content: str) -> Message:
    from dataclasses import replace

    return replace(message, content=content)


def _orphan(view: list[Message], index: int) -> bool:
    """A tool result whose assistant call is no longer in the view."""
    call_id = view[index].tool_call_id
    return not any(c.id == call_id for m in view[:index] for c in m.tool_calls)


def touched_paths(messages: Iterable[Message]) -> set[str]:
    """Paths the conversation's tool calls used (their directories' AGENTS.md apply)."""
    out = set()
    for message in messages:
        for call in message.tool_calls:
            path = call.arguments.get("path")
            if isinstance(path, str) and path.strip():
                path = path.strip()
                out.add(path[2:] if path.startswith("./") else path)
    return out

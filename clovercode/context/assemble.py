"""Per task: turns config + backend + task into a ContextPrompt (map focused on the task, kept fresh)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from clovercode.ground.events import EventSink
from clovercode.ground.messages import Message
from clovercode.ground.conversation import Conversation, system_prompt
from clovercode.context.grammars import map_missing
from clovercode.context.prompt import Budget, ContextPrompt, touched_paths
from clovercode.context.tokens import counter_for, tools_tokens, window_for
from clovercode.toolcalls.schemas import ToolSpec

MAP_WINDOW_SHARE = 8  # the map never takes more than 1/8 of the window
_PATHLIKE = re.compile(r"[\w.][\w./-]*")


def conversation_texts(messages: Sequence[Message]) -> list[str]:
    """What the person and the model said (not tool outputs: a file listing mentions everything)."""
    texts = []
    for message in messages:
        if message.role in ("user", "assistant") and message.content:
            texts.append(message.content)
        for call in message.tool_calls:
            texts.extend(str(v) for v in call.arguments.values() if isinstance(v, str) and len(v) < 500)
    return texts


def mentioned_paths(root: Path, text: str) -> set[str]:
    """Existing project paths written in ``text`` (so their AGENTS.md apply even without a map)."""
    found = set()
    for word in _PATHLIKE.findall(text):
        word = word.rstrip(".,:;")
        if ("/" not in word and "." not in word) or word.startswith(("/", "..")):
            continue
        try:
            if (root / word).exists():
                found.add(word[2:] if word.startswith("./") else word)
        except OSError:  # a "word" too long to be a file name
            continue
    return found


class ContextAssembler:
    def __init__(self, root: Path, cfg: Any, env: Mapping[str, str], interactive: bool):
        self.root, self.cfg, self.env, self.interactive = root, cfg, env, interactive

    def prompt_for(self, conversation: Conversation, task: str, specs: Sequence[ToolSpec], backend: Any,
                   max_new_tokens: int, sink: EventSink | None = None) -> ContextPrompt:
        count, exact = counter_for(backend)
        window = window_for(backend, self.cfg["context.window"])
        budget = Budget.from_config(self.cfg, window, max_new_tokens)
        touched = touched_paths(conversation.messages) | mentioned_paths(self.root, task)
        map_budget = min(self.cfg["context.map_tokens"], window // MAP_WINDOW_SHARE)
        repo_map: Any = ""
        if map_budget > 0 and not map_missing():  # without the context extra: no map (open_session says so)
            from clovercode.context.refresh import MapRefresher

            # Focused on what was said before this task and the task itself, refreshed whenever the tree changes.
            repo_map = MapRefresher(self.root, self.cfg, self.env, map_budget, count, task, set(touched), sink,
                                    conversation_texts)
        return ContextPrompt(root=self.root, base_system=system_prompt(self.root, self.interactive), repo_map=repo_map,
                             tools_tokens=tools_tokens(specs, count), count=count, exact=exact, budget=budget,
                             touched=touched, instructions=self.cfg["context.instructions"], sink=sink,
                             refuse_task=getattr(backend, "refuse_task", None))

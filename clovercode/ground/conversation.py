"""The conversation, the system prompt and the default prompt builder (history in full; the context
package adds repo maps, instruction files and a token budget behind the same ``PromptBuilder`` seam).
Ground floor: the agent runs a conversation and the context below it builds prompts from one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from clovercode.ground.messages import Message

SYSTEM_PROMPT = """\
You are clovercode, an expert software engineer working in the project at {root}.
You act only through the tools you are given. Work in small, checked steps:
1. Find the relevant code (list_files, search_text) and read it (view_file) before changing it.
2. Change files with edit_file (exact old_text copied from the file) or write_file for new files.
3. Run the project's tests or a quick check with run_command to verify the change.
4. {finish_rule}
Keep changes minimal and in the project's style. Never invent file contents you have not read.
If a tool returns an error, read it carefully and correct the call; do not repeat a failing call unchanged.
"""

AUTONOMOUS_FINISH = "When the task is done, or cannot be done, call finish with a summary of what you changed and how you verified it."
INTERACTIVE_FINISH = ("When you have done what the user asked, call finish with a short summary, "
                      "or answer in plain text if the user only asked a question.")


def system_prompt(root: Path, interactive: bool) -> str:
    return SYSTEM_PROMPT.format(root=root, finish_rule=INTERACTIVE_FINISH if interactive else AUTONOMOUS_FINISH)


@dataclass
class Conversation:
    """The running history of a session (the system prompt is added by the prompt builder)."""

    messages: list[Message] = field(default_factory=list)

    def add(self, message: Message) -> None:
        self.messages.append(message)

    def clear(self) -> None:
        self.messages.clear()


class PromptBuilder(Protocol):
    def build(self, conversation: Conversation) -> list[Message]:
        ...


@dataclass
class FullHistoryPrompt:
    system: str

    def build(self, conversation: Conversation) -> list[Message]:
        return [Message("system", self.system), *conversation.messages]

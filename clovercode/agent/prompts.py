"""The conversation vocabulary lives on the ground floor (:mod:`clovercode.ground.conversation`); these names stay for callers."""

from clovercode.ground.conversation import (AUTONOMOUS_FINISH, INTERACTIVE_FINISH, SYSTEM_PROMPT, Conversation,
                                            FullHistoryPrompt, PromptBuilder, system_prompt)

__all__ = ["AUTONOMOUS_FINISH", "INTERACTIVE_FINISH", "SYSTEM_PROMPT", "Conversation", "FullHistoryPrompt",
           "PromptBuilder", "system_prompt"]

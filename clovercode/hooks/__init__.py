"""Hooks: the user's commands run before and after tool calls and when the model wants to stop."""

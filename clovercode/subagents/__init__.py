"""Subagents: the ``task`` tool hands a self-contained subtask to a child agent with a fresh context,
its own budget and narrower rights, run through the same loop (agent/loop.py); several in one turn
run concurrently. docs/subagents.md."""

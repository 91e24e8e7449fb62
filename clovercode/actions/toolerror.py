"""The error a tool handler raises; its own module so the file access and the guards can raise it
without importing the tool context that builds them (actions/context.py re-exports it)."""


class ToolError(Exception):
    """A tool could not do what was asked; the message is written for the model."""

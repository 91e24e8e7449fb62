"""The interactive REPL: input (repl/inputs.py), slash commands (repl/commands.py), the run view
and transcript (repl/transcript.py), @file and !command input (repl/attach.py)."""

from clovercode.repl.app import run_repl

__all__ = ["run_repl"]

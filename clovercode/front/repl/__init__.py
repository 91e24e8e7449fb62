"""The interactive REPL: input (front/repl/inputs.py), slash commands (front/repl/commands.py), the run view
and transcript (front/repl/transcript.py), @file and !command input (front/repl/attach.py)."""

from clovercode.front.repl.app import run_repl

__all__ = ["run_repl"]

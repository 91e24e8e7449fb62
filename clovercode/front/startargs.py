"""`clovercode "task"` opens the REPL with that first message, as `claude "…"` and `codex "…"` do: a
first word on the command line that names no command is the task, lifted into the hidden
``--task`` option before click looks for a command. Options before or after it keep their meaning."""

from __future__ import annotations

from typing import Any, Sequence

TASK_OPTION = "--task"


def lift_task(group: Any, args: Sequence[str]) -> list[str]:
    """``args`` with the first positional word that is not a command made ``--task=WORD``; unchanged
    when that word is a command, or when the group has no ``--task`` option (a sub-group)."""
    out = list(args)
    options = {opt: param for param in group.params for opt in (*param.opts, *param.secondary_opts)}
    if TASK_OPTION not in options:
        return out
    at, dashes = 0, None
    while at < len(out):
        arg = out[at]
        if arg == "--":  # what follows is the task, whatever it looks like
            dashes = at
            at += 1
            break
        if arg.startswith("-") and arg != "-":
            param = options.get(arg.split("=", 1)[0])
            takes_value = param is not None and not getattr(param, "is_flag", False) and getattr(param, "nargs", 1) != 0
            at += 2 if takes_value and "=" not in arg else 1
            continue
        break
    if at >= len(out) or out[at] in group.commands:
        return out
    task = out.pop(at)
    if dashes is not None:
        out.pop(dashes)
    return [f"{TASK_OPTION}={task}", *out]

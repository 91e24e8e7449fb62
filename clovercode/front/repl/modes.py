"""The REPL's approval mode while it runs: Shift+Tab cycles it (shown on the prompt line), /plan
enters plan mode, and a planning turn ends with the plan put to the person: approve it (the mode
becomes the chosen one and the work starts) or say what to change (another planning turn)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from rich.markup import escape

from clovercode.actions.approval import PLAN, ModeApprover
from clovercode.agent.planmode import approved_task

if TYPE_CHECKING:
    from clovercode.front.repl.app import Repl

CYCLE = ("suggest", "auto-edit", PLAN)
LABELS = {"suggest": "ask before acting", "auto-edit": "auto-edit: edits applied", "full-auto": "full-auto",
          PLAN: "plan mode: read only"}
# Asks one answer among letters; None for Esc / Ctrl-D (ui/approval_prompt.choose bound to the REPL's input).
Choose = Callable[[str, str], "str | None"]
ReadLine = Callable[..., "str | None"]


class Modes:
    """The approver's mode as the person switches it. full-auto is in the cycle only when the
    session started in it: a key never grants more than the command line did."""

    def __init__(self, approver: ModeApprover):
        self.approver = approver
        self.cycle_of = CYCLE if approver.mode in CYCLE else ("suggest", "auto-edit", approver.mode, PLAN)

    @property
    def mode(self) -> str:
        return self.approver.mode

    def set(self, mode: str) -> None:
        self.approver.mode = mode

    def cycle(self) -> str:
        at = self.cycle_of.index(self.mode) if self.mode in self.cycle_of else -1
        self.set(self.cycle_of[(at + 1) % len(self.cycle_of)])
        return self.mode

    def label(self) -> str:
        return f"{LABELS.get(self.mode, self.mode)} · shift+tab"


def plan_command(repl: "Repl", arg: str) -> bool:
    """/plan [TASK]: plan mode, and with TASK a planning turn at once."""
    if repl.modes.mode != PLAN:
        repl.modes.set(PLAN)
        repl.console.print("[bold]plan mode[/]: only reading tools run until you approve a plan "
                           "(Shift+Tab or /plan again shows the modes)", highlight=False)
    elif not arg:
        from clovercode.ui.checklist import print_plan

        if repl.screen.plan:
            print_plan(repl.console, repl.screen.plan)
        repl.console.print("plan mode is on: type the task to plan; Shift+Tab leaves it", highlight=False)
    if arg:
        repl.run_task(arg)
    return True


def settle_plan(repl: "Repl", choose: Choose, read_line: ReadLine) -> None:
    """After a planning turn that ended with an answer: approve the plan, refine it, or leave it.
    As in Claude Code, approving picks how the work is then asked about."""
    choices = {"y": "suggest", "a": "auto-edit"}
    offer = "[y]es, asking before each change / [a] yes, applying edits (auto-edit)"
    if "full-auto" in repl.modes.cycle_of:  # the session started in it: offered, never granted by a key alone
        choices["f"] = "full-auto"
        offer += " / [f]ull-auto"
    key = choose(f"Carry out this plan? {offer} / [n]o, say what to change · Esc keeps planning: ",
                 "".join(choices) + "n")
    if key in choices:
        repl.modes.set(choices[key])
        repl.console.print(f"[green]plan approved[/] · approval: {escape(choices[key])}", highlight=False)
        repl.run_task(approved_task())
    elif key == "n":
        change = read_line("What should change in the plan? ")
        if change and change.strip():
            repl.run_task(change.strip())

"""One model turn → the calls that may run and the exact feedback the model gets for the rest."""

from __future__ import annotations

from dataclasses import dataclass, field

from clovercode.toolcalls.parser import ParsedCall, ParsedTurn, parse_turn
from clovercode.toolcalls.validate import CheckedCall, Validator

FORMAT_REMINDER = """\
Tool calls must be written like this, one block per call:
<tool_call>
<function=TOOL_NAME>
<parameter=ARGUMENT_NAME>
value
</parameter>
</function>
</tool_call>"""

NO_CALL_MESSAGE = ("Your reply contained no tool call. Continue the task by calling a tool, "
                   "or call `finish` when you are done.\n" + FORMAT_REMINDER)


@dataclass
class TurnReview:
    turn: ParsedTurn
    checked: list[CheckedCall] = field(default_factory=list)
    # Text for the model about parse problems (sent as a user message); None when there are none.
    format_feedback: str | None = None

    @property
    def runnable(self) -> list[CheckedCall]:
        return [c for c in self.checked if c.ok]

    @property
    def invalid(self) -> list[CheckedCall]:
        return [c for c in self.checked if not c.ok]

    @property
    def has_format_error(self) -> bool:
        return bool(self.invalid) or self.format_feedback is not None

    def feedback(self) -> list[str]:
        """Everything the model is told about this turn's mistakes, in order."""
        texts = [c.error or "" for c in self.invalid]
        return texts + ([self.format_feedback] if self.format_feedback else [])


def review_turn(text: str, validator: Validator, *, step: int, require_call: bool,
                server_calls: list[ParsedCall] | None = None) -> TurnReview:
    """Parse ``text``, validate every call, and write the feedback for what cannot run.

    ``require_call``: a reply without any tool call is itself a format error (unattended runs).
    ``server_calls``: calls a server already parsed (they come before any found in the text).
    """
    turn = parse_turn(text, known_tools=list(validator.specs))
    if server_calls:
        turn.calls = list(server_calls) + turn.calls
    review = TurnReview(turn, [validator.check(call, f"call_{step}_{i}") for i, call in enumerate(turn.calls, 1)])
    if turn.errors:
        review.format_feedback = "\n".join([*turn.errors, FORMAT_REMINDER])
    elif not turn.calls and require_call:
        review.format_feedback = NO_CALL_MESSAGE
    return review

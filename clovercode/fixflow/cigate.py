"""`fix` does not commit what runs outside the sandbox once published: CI definitions (a workflow
runs with the repository's secrets) and hooks in a ``core.hooksPath`` directory inside the tree (run
by the next ``git commit``), unless the user passed ``--allow-ci-changes``. The list is data
(sandbox/protected.toml ``runs_outside``); docs/ci.md, "Changes to CI definitions"."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from clovercode.ground.errors import CiChangeRefused
from clovercode.sandboxing.policy import load_runs_outside
from clovercode.trust.paths import runs_outside

SHOWN = 10  # paths named in the message; the JSON result lists all


def ci_changes(top: Path, paths: Sequence[str]) -> list[str]:
    """The paths among ``paths`` (relative to the work tree's top) that run outside the sandbox later."""
    _, found = runs_outside(top, load_runs_outside())
    return found.refused(paths)


def refuse_ci_changes(refused: Sequence[str]) -> CiChangeRefused:
    """The refusal for ``refused`` (non-empty): what, why, where the change is, how to go on."""
    named = ", ".join(refused[:SHOWN]) + (f" and {len(refused) - SHOWN} more" if len(refused) > SHOWN else "")
    return CiChangeRefused(
        f"the change touches CI definitions, git hooks or files that make other tools run commands, which run "
        f"outside the sandbox once committed: {named}. "
        "Nothing was committed or pushed and no pull request was opened",
        hint="The whole change is in the working tree, uncommitted, on the branch you started from. Review it "
             "(git status, git diff), then commit it yourself, or run again with --allow-ci-changes if the "
             "issue asks for a CI change.")

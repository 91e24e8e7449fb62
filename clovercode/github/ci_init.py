"""Body of `clovercode ci init`: choose the install source, write the workflow, say what to do next."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from clovercode.github.bot_workflows import REVIEW_PATH, RESPOND_PATH, render_respond, render_review
from clovercode.github.install_source import EXAMPLE, check_source, installed_source
from clovercode.ground.errors import UsageError
from clovercode.github.workflow import WORKFLOW_PATH, WorkflowOptions, render_workflow, write_workflow


def run_ci_init(root: Path, model_on: str, label: str, command: str, runner: str | None, source: str | None,
                force: bool, console: Console, *, fix: bool = True, review: bool = False, respond: bool = False,
                mention: str = "@clovercode") -> None:
    detected = False
    if source is None:
        source, detected = installed_source(), True
    checked = check_source(source) if source is not None else None  # refuses a name or a branch before writing
    options = WorkflowOptions(model_on, label, command, runner, source)
    # every file is rendered (and checked) before the first is written: a bad flag writes nothing
    texts = [(where, text) for wanted, where, text in (
        (fix, None, render_workflow(options)),
        (review, REVIEW_PATH, render_review(options) if review else ""),
        (respond, RESPOND_PATH, render_respond(options, mention) if respond else "")) if wanted]
    for where, _ in texts:
        if not force and os.path.lexists(root / (where or WORKFLOW_PATH)):
            raise UsageError(f"{root / (where or WORKFLOW_PATH)} already exists", hint="Pass --force to overwrite it.")
    for where, text in texts:
        path = write_workflow(root, options, force=force, text=text, **({"where": where} if where else {}))
        console.print(f"wrote {escape(str(path))}", highlight=False)
    if checked is None:
        console.print("[bold yellow]warning[/]: the workflow installs clovercode from the repository variable "
                      f"CLOVERCODE_SOURCE, which must be set to a pinned source you control, e.g. {escape(EXAMPLE)}; "
                      "until it is, the job stops before installing anything. Or run `clovercode ci init --force "
                      "--source ...` to pin it in the file.", highlight=False)
    else:
        how = " (the source this clovercode was installed from)" if detected else ""
        console.print(f"clovercode is installed from {escape(checked.url)}{how}", highlight=False)
        if checked.warning:
            console.print(f"[bold yellow]warning[/]: {escape(checked.warning)}", highlight=False)
    console.print("Next: read docs/ci.md for the token permissions and the repository settings.", highlight=False)

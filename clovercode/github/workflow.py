"""`clovercode ci init`: the GitHub Actions workflow that runs `clovercode fix` on a label or a comment."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clovercode import __version__
from clovercode.ground.errors import UsageError
from clovercode.github.install_source import EXAMPLE, check_source
from clovercode.trust.projectview import OutsideProject, ProjectView

WORKFLOW_PATH = Path(".github/workflows/clovercode.yml")
MODEL_PLACES = ("gpu-runner", "endpoint")
# Third-party actions by commit: a tag can be moved to other code, a commit cannot. The tag is in the
# comment, for people and for tools that propose updates (Dependabot, Renovate).
ACTIONS = {
    "CHECKOUT_ACTION": "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683  # v4.2.2",
    "SETUP_PYTHON_ACTION": "actions/setup-python@a26af69be951a213d495a4c3e4e4022e16d87065  # v5.6.0",
    "UPLOAD_ARTIFACT_ACTION": "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02  # v4.6.2",
}
DEFAULT_RUNNERS = {"gpu-runner": "self-hosted,linux,gpu", "endpoint": "ubuntu-latest"}
BOT_AUTHOR = "github-actions[bot] <41898282+github-actions[bot]@users.noreply.github.com>"

HEADER = """\
# Written by `clovercode ci init` (clovercode @@VERSION@@); docs/ci.md explains every part.
# Label an issue '@@LABEL@@', or comment '@@COMMAND@@' on it (owners, members and collaborators only),
# and clovercode fixes it on a branch and opens a pull request (a draft when the change breaks tests).
name: clovercode

on:
  issues:
    types: [labeled]
  # The job's `if:` acts only on a comment that starts with the command, by an owner, member or
  # collaborator, on an issue (never a pull request's code); the comment's text never reaches a shell
  # (the issue is read from the API by its number). So zizmor's warning about this trigger is answered:
  issue_comment:  # zizmor: ignore[dangerous-triggers]
    types: [created]

permissions: {}          # nothing by default; the job asks for what it uses

concurrency:             # one run per issue at a time; a second waits instead of racing the first
  group: clovercode-${{ github.event.issue.number }}
  cancel-in-progress: false

jobs:
  fix:
    if: >-
      (github.event_name == 'issues' && github.event.label.name == '@@LABEL@@') ||
      (github.event_name == 'issue_comment' && !github.event.issue.pull_request &&
       startsWith(github.event.comment.body, '@@COMMAND@@') &&
       contains(fromJSON('["OWNER", "MEMBER", "COLLABORATOR"]'), github.event.comment.author_association))
    runs-on: @@RUNNER@@
    timeout-minutes: 90
    permissions:
      contents: write        # push the fix branch
      pull-requests: write   # open or update the pull request
      issues: read           # read the issue
    steps:
      - uses: @@CHECKOUT_ACTION@@
        with:
          persist-credentials: false   # no token in .git/config while the model works; fix pushes with it
"""

GPU_STEPS = """\
      # The model runs in-process on this self-hosted GPU runner. Set the repository variable
      # CLOVERCODE_MODEL to a local model directory (kept on the runner) or another model spec.
@@SOURCE_NOTE@@      - name: Install clovercode
        env:
          CLOVERCODE_SOURCE: @@SOURCE@@
        run: |
@@SOURCE_CHECK@@          python3 -m venv "$RUNNER_TEMP/clovercode-venv"
          "$RUNNER_TEMP/clovercode-venv/bin/pip" install --quiet "clovercode[@@EXTRAS@@] @ $CLOVERCODE_SOURCE"
          echo "$RUNNER_TEMP/clovercode-venv/bin" >> "$GITHUB_PATH"
"""

ENDPOINT_STEPS = """\
      # The model is served elsewhere (clovercode serve, SGLang, vLLM …): set the repository variable
      # CLOVERCODE_ENDPOINT to its OpenAI-compatible URL and the secret CLOVERCODE_API_KEY if it needs one.
      - uses: @@SETUP_PYTHON_ACTION@@
        with:
          python-version: "3.12"
@@SOURCE_NOTE@@      - name: Install clovercode and the sandbox
        env:
          CLOVERCODE_SOURCE: @@SOURCE@@
        run: |
@@SOURCE_CHECK@@          pip install --quiet "clovercode[@@EXTRAS@@] @ $CLOVERCODE_SOURCE"
          sudo apt-get install -y -q bubblewrap
          # Ubuntu 24.04 keeps unprivileged user namespaces from bubblewrap unless this is lifted
          sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 || true
"""

FIX_STEPS = """\
      # Install what the project's tests need here, so the test loop can run them, e.g.:
      # - run: pip install -e ".[test]"
      - name: Fix the issue
        env:
          GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}
          ISSUE: ${{ github.repository }}#${{ github.event.issue.number }}
          CLOVERCODE_GITHUB_API_URL: ${{ github.api_url }}
          CLOVERCODE_FIX_PUSH_TOKEN: "true"
          CLOVERCODE_TRAJECTORY_DIR: ${{ runner.temp }}/clovercode-trajectories
          # Best of N: N attempts side by side, the one the tests prove is published (docs/fix.md);
          # each attempt costs a run of model time (batched on one GPU with the embedded engine).
          # CLOVERCODE_FIX_ATTEMPTS: "3"
@@MODEL_ENV@@        run: |
          set +e
          # --trust-project: clovercode.toml here is the repository's own (default branch); the issue
          # text stays untrusted, and no project file chooses the model, the token or the target.
          clovercode fix --github-issue "$ISSUE" --pr --json --trust-project \\
            --author "@@AUTHOR@@" > "$RUNNER_TEMP/clovercode-result.json"
          code=$?
          set -e
          echo "clovercode fix exited with $code (see docs/ci.md for the codes)" >> "$GITHUB_STEP_SUMMARY"
          case $code in
            0|1) exit 0 ;;  # a pull request is open (a draft when the change breaks tests)
            3|4) echo "::warning::clovercode made no pull request (exit code $code)"; exit 0 ;;
            8) echo "::error::the change touches CI definitions or git hooks: nothing was pushed (exit code 8, docs/ci.md)"; exit 8 ;;
            9) echo "::error::clovercode opened a draft pull request, but no test shows the issue fixed (unverified, exit code 9)"; exit 9 ;;
            *) exit $code ;;
          esac
      - name: Keep the result and the trajectory
        if: always()
        uses: @@UPLOAD_ARTIFACT_ACTION@@
        with:
          name: clovercode-issue-${{ github.event.issue.number }}
          path: |
            ${{ runner.temp }}/clovercode-result.json
            ${{ runner.temp }}/clovercode-trajectories/
          if-no-files-found: ignore
"""

SOURCE_NOTE = """\
      # clovercode is installed from CLOVERCODE_SOURCE, a source you control and pin (a git URL at a
      # commit, or a wheel), never by name from PyPI, where the name is not this project's (docs/ci.md).
"""
SOURCE_CHECK = """\
          if [ -z "$CLOVERCODE_SOURCE" ]; then
            echo "::error::Set the repository variable CLOVERCODE_SOURCE to a pinned clovercode source, e.g. @@EXAMPLE@@ (docs/ci.md)"
            exit 1
          fi
"""

# The extras each mode installs (pyproject.toml): the engine where the model runs in-process, and the
# repository map (`context`) in both; without it a run works but the model sees no map.
EXTRAS = {"gpu-runner": "engine,context", "endpoint": "context"}

MODEL_ENV = {
    "gpu-runner": "          CLOVERCODE_MODEL: ${{ vars.CLOVERCODE_MODEL || 'clover' }}\n",
    "endpoint": "          CLOVERCODE_ENDPOINT: ${{ vars.CLOVERCODE_ENDPOINT }}\n"
                "          CLOVERCODE_API_KEY: ${{ secrets.CLOVERCODE_API_KEY }}\n",
}


@dataclass(frozen=True)
class WorkflowOptions:
    model_on: str = "gpu-runner"
    label: str = "clovercode"
    command: str = "/clovercode"
    runner: str | None = None  # comma-separated runs-on labels
    source: str | None = None  # where clovercode is installed from (install_source.check_source); None: vars.CLOVERCODE_SOURCE


def render_workflow(options: WorkflowOptions) -> str:
    """The workflow text for ``options`` (pure); raises UsageError for values that would break it."""
    return fill(HEADER + (GPU_STEPS if options.model_on == "gpu-runner" else ENDPOINT_STEPS) + FIX_STEPS, options)


def fill(text: str, options: WorkflowOptions, **more: str) -> str:
    """``text`` with every @@KEY@@ replaced: the runner, the install source and the model settings of
    ``options`` (checked: a UsageError for values that would break the file), and ``more``."""
    if options.model_on not in MODEL_PLACES:
        raise UsageError(f"--model-on must be one of {', '.join(MODEL_PLACES)}; got {options.model_on!r}")
    # These land inside quoted YAML and expression strings: allow only characters that need no escaping.
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 _.:/+-]{0,49}", options.label):
        raise UsageError(f"--label {options.label!r}: use letters, digits, spaces and _ . : / + - (at most 50)")
    if not re.fullmatch(r"/[A-Za-z0-9_.-]{1,40}", options.command):
        raise UsageError(f"--command {options.command!r}: use a slash and a word, like /clovercode")
    labels = [s.strip() for s in (options.runner or DEFAULT_RUNNERS[options.model_on]).split(",") if s.strip()]
    if not labels or not all(re.fullmatch(r"[A-Za-z0-9_.-]+", s) for s in labels):
        raise UsageError(f"--runner {options.runner!r}: comma-separated runner labels, like self-hosted,linux,gpu")
    if options.source is not None:
        source, check = f'"{check_source(options.source).url}"', ""  # pinned in the file, reviewed with it
    else:
        source, check = "${{ vars.CLOVERCODE_SOURCE }}", SOURCE_CHECK.replace("@@EXAMPLE@@", EXAMPLE)
    runner = labels[0] if len(labels) == 1 else "[" + ", ".join(labels) + "]"
    for key, value in (*more.items(), *ACTIONS.items(), ("MODEL_ENV", MODEL_ENV[options.model_on]), ("VERSION", __version__), ("LABEL", options.label),
                       ("COMMAND", options.command), ("RUNNER", runner), ("SOURCE_NOTE", SOURCE_NOTE), ("SOURCE_CHECK", check), ("SOURCE", source),
                       ("EXTRAS", EXTRAS[options.model_on]), ("AUTHOR", BOT_AUTHOR)):
        text = text.replace(f"@@{key}@@", value)
    return text


def install_steps(options: WorkflowOptions) -> str:
    """The steps that install clovercode (and the sandbox) where ``options`` runs the model, unfilled."""
    return GPU_STEPS if options.model_on == "gpu-runner" else ENDPOINT_STEPS


def write_workflow(root: Path, options: WorkflowOptions, *, force: bool = False, text: str | None = None,
                   where: Path = WORKFLOW_PATH) -> Path:
    """Write the workflow (``text``, default the fix workflow) under ``root`` atomically; an existing
    file is kept unless ``force``."""
    text = render_workflow(options) if text is None else text
    path = root / where
    # Through the project view, and only at the path as spelled: a repository can ship `.github` as a
    # link (out of the project, or to another of its directories), and the workflow is not written
    # through it.
    view = ProjectView(root)
    try:
        real = view.resolve(where)
    except OutsideProject:
        raise UsageError(f"cannot write {path}: a directory on its way is a link that leads outside the project",
                         hint="Replace the link by a real directory, then run `clovercode ci init` again.") from None
    if real != view.root / where:
        raise UsageError(f"cannot write {path}: a directory on its way is a link (to {real.parent})",
                         hint="Replace the link by a real directory, then run `clovercode ci init` again.")
    if view.kind(where) is not None and not force:
        raise UsageError(f"{path} already exists", hint="Pass --force to overwrite it.")
    try:
        view.write_bytes(where, text.encode("utf-8"), follow_last=False)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path

"""`clovercode ci init --review --respond`: the review and the respond workflows.

Both install clovercode exactly as the fix workflow does (a pinned source, workflow.py), run on the
same runner, and give each job only the permissions it uses. Neither passes --trust-project: the
checkout is a pull request's branch, whose clovercode.toml its author wrote. Untrusted text (titles,
bodies, comments) never reaches a shell through an expression: the commands get the comment's URL
and the pull request's number through the environment, and read the text from the API themselves.
"""

from __future__ import annotations

import re
from pathlib import Path

from clovercode.ground.errors import UsageError
from clovercode.github.workflow import WorkflowOptions, fill, install_steps

REVIEW_PATH = Path(".github/workflows/clovercode-review.yml")
RESPOND_PATH = Path(".github/workflows/clovercode-respond.yml")
TRUSTED = '["OWNER", "MEMBER", "COLLABORATOR"]'

CHECKOUT = """\
      - uses: @@CHECKOUT_ACTION@@
        with:
@@REF@@          fetch-depth: 0               # the base branch too: the diff is taken against it
          persist-credentials: false   # no token in .git/config while the model works
"""

REVIEW = """\
# Written by `clovercode ci init --review` (clovercode @@VERSION@@); docs/ci.md explains every part.
# clovercode reviews each pull request from a branch of this repository when it is opened, pushed to or
# marked ready, and posts one review: line comments on changed lines, a summary updated on each push.
name: clovercode review

on:
  pull_request:
    types: [opened, synchronize, ready_for_review]

permissions: {}          # nothing by default; the job asks for what it uses

concurrency:             # one review per pull request; a newer push makes the running one moot
  group: clovercode-review-${{ github.event.pull_request.number }}
  cancel-in-progress: true

jobs:
  review:
    # A fork's pull request would run its own code (the tests) on this runner: branches of this
    # repository only, whose authors can push here anyway.
    if: >-
      !github.event.pull_request.draft &&
      github.event.pull_request.head.repo.full_name == github.repository
    runs-on: @@RUNNER@@
    timeout-minutes: 60
    permissions:
      contents: read         # read the code
      pull-requests: write   # post the review
    steps:
@@CHECKOUT@@@@INSTALL@@      - name: Review the pull request
        env:
          GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}
          PULL: ${{ github.repository }}#${{ github.event.pull_request.number }}
          CLOVERCODE_GITHUB_API_URL: ${{ github.api_url }}
          CLOVERCODE_TRAJECTORY_DIR: ${{ runner.temp }}/clovercode-trajectories
@@MODEL_ENV@@        run: |
          clovercode review --github-pr "$PULL" --post --json > "$RUNNER_TEMP/clovercode-review.json"
"""

RESPOND = """\
# Written by `clovercode ci init --respond` (clovercode @@VERSION@@); docs/ci.md explains every part.
# Mention @@MENTION@@ in a comment, a review or a review comment (owners, members and collaborators
# only) and clovercode pushes one follow-up commit to the pull request's branch and replies; on an
# issue without a pull request it opens one, like `clovercode fix --pr`.
name: clovercode respond

on:
  # The job's `if:` acts only on a mention by an owner, member or collaborator, never a bot; no text
  # of the comment reaches a shell (respond reads it from the API). So zizmor's warning is answered:
  issue_comment:  # zizmor: ignore[dangerous-triggers]
    types: [created]
  pull_request_review_comment:
    types: [created]
  pull_request_review:
    types: [submitted]

permissions: {}          # nothing by default; the job asks for what it uses

concurrency:             # one run per pull request or issue at a time; a second waits its turn
  group: clovercode-respond-${{ github.event.issue.number || github.event.pull_request.number }}
  cancel-in-progress: false

jobs:
  respond:
    if: >-
      contains(github.event.comment.body || github.event.review.body || '', '@@MENTION@@') &&
      contains(fromJSON('@@TRUSTED@@'),
               github.event.comment.author_association || github.event.review.author_association) &&
      (github.event.comment.user.type || github.event.review.user.type) != 'Bot'
    runs-on: @@RUNNER@@
    timeout-minutes: 90
    permissions:
      contents: write        # push the follow-up commit (or a fix branch)
      pull-requests: write   # reply on the pull request, or open one for an issue
      issues: write          # reply on an issue
    steps:
@@CHECKOUT@@@@INSTALL@@      # Install what the project's tests need here, so the test loop can run them.
      - name: Respond to the comment
        env:
          GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}
          COMMENT_URL: ${{ github.event.comment.html_url || github.event.review.html_url }}
          EVENT_ACTION: ${{ github.event.action }}
          CLOVERCODE_GITHUB_API_URL: ${{ github.api_url }}
          CLOVERCODE_GITHUB_MENTION: "@@MENTION@@"
          CLOVERCODE_FIX_PUSH_TOKEN: "true"
          CLOVERCODE_TRAJECTORY_DIR: ${{ runner.temp }}/clovercode-trajectories
@@MODEL_ENV@@        run: |
          set +e
          # respond checks again what the `if:` checked (trust, mention, bots, edits): the log says why it skips
          clovercode respond --github-comment "$COMMENT_URL" --event-action "$EVENT_ACTION" --json \\
            --author "@@AUTHOR@@" > "$RUNNER_TEMP/clovercode-result.json"
          code=$?
          set -e
          echo "clovercode respond exited with $code (see docs/ci.md for the codes)" >> "$GITHUB_STEP_SUMMARY"
          case $code in
            0|1|9) exit 0 ;;  # pushed and replied (the reply says the verdict)
            3|4) echo "::warning::clovercode made no follow-up commit (exit code $code)"; exit 0 ;;
            *) exit $code ;;  # 7: e.g. the branch moved during the run (nothing lost, nothing pushed); 8: CI files
          esac
"""


def check_mention(mention: str) -> str:
    if not re.fullmatch(r"@[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?", mention):
        raise UsageError(f"--mention {mention!r}: an @ and a GitHub login, like @clovercode")
    return mention


def render_review(options: WorkflowOptions) -> str:
    checkout = CHECKOUT.replace("@@REF@@", "          ref: ${{ github.event.pull_request.head.sha }}   # the code as pushed, not a merge\n")
    return fill(REVIEW, options, CHECKOUT=checkout, INSTALL=install_steps(options))


def render_respond(options: WorkflowOptions, mention: str = "@clovercode") -> str:
    checkout = CHECKOUT.replace("@@REF@@", "")  # respond checks out the pull request's branch itself
    return fill(RESPOND, options, CHECKOUT=checkout, INSTALL=install_steps(options), MENTION=check_mention(mention),
                TRUSTED=TRUSTED)

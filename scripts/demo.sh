#!/usr/bin/env bash
# The main job: copy the example project into a fresh git repository and let clovercode fix its bug,
# replaying a recorded model session (examples/calc.replay.jsonl). Prints the summary and the commit.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -x "$here/.venv/bin/clovercode" ]; then
  echo "clovercode is not set up in $here/.venv: run ./scripts/setup.sh first" >&2
  exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$here/examples/calc" "$work/calc"
cd "$work/calc"
git init -q && git add -A
git config user.name "Demo User" && git config user.email demo@example.invalid
git commit -q -m "calc with a bug"
base="$(git rev-parse HEAD)"
set +e
"$here/.venv/bin/clovercode" fix "mean([1, 2, 3, 4]) returns 2 but should return 2.5" \
  --model "replay:$here/examples/calc.replay.jsonl" "$@"
code=$?
set -e
# fix commits on a branch named from the issue and leaves the checkout there: show that commit
git --no-pager log -p "$base"..HEAD
git --no-pager diff
exit $code

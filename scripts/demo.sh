#!/usr/bin/env bash
# The main job: copy the example project into a fresh git repository and let clovercode fix its bug,
# replaying a recorded model session (examples/calc.replay.jsonl). Prints the summary and the diff.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$here/examples/calc" "$work/calc"
cd "$work/calc"
git init -q && git add -A
git -c user.name=demo -c user.email=demo@example.invalid commit -q -m "calc with a bug"
set +e
"$here/.venv/bin/clovercode" fix "mean([1, 2, 3, 4]) returns 2 but should return 2.5" \
  --model "replay:$here/examples/calc.replay.jsonl" "$@"
code=$?
set -e
git --no-pager diff
exit $code

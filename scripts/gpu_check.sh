#!/usr/bin/env bash
# The one-shot GPU check (issue 13): the engine's exactness on CUDA (fp32 and bf16), per-pass latency
# on a random-weight model with Clover's architecture (B = 1/16/32 rows at 2k and 32k prompt tokens,
# eager vs CUDA graphs, batch 1 vs 8), whether the fast Gated DeltaNet kernels are in use, and
# clover-tiny tokens/s, and subagents on clover-tiny batched vs sequential (N = 1, 2, 4, 8), as one JSON
# report. About 3-6 minutes on one H200 (docs/engine.md, GPU plan).
#
#   scripts/gpu_check.sh [--out FILE] [--wheels DIR] [--device cuda|cpu] [--layers N] [--prompts 2048,32768]
#                        [--rows 1,16,32] [--budget-s S] [--skip exactness,latency,tiny,subagents]
#                        [--roofline [--roofline-layers 40] [--roofline-modes none,int8,int4,fp8]]
#
# --roofline (issue 44; clovercode/bench/gpuroofline.py): a Clover-shaped random model built on the GPU
# at --roofline-layers (default all 40, bf16 ~70 GB), and per weights mode: load time, device peak,
# block pass ms at batch 1 and 8 against the floor, tokens/s at clover-tiny's forwards per token,
# operations per MoE layer, and each kernel path's exactness against its reference, in the report's
# "roofline". With --skip exactness,latency,tiny,subagents it is the only section (about 3-5 minutes).
#
# It needs only Python with torch, transformers and rich (what the GPU machine's image has), run from
# this checkout: no install, no network. --wheels DIR installs pure-Python wheels carried in DIR
# (e.g. flash-linear-attention and fla-core) into a temporary directory first. --device cpu is the
# dry run with tiny sizes (tests/test_gpu_check.py). Exit status 0 when every exactness check passed
# and no section failed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
wheels=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) wheels=${2:?--wheels needs a directory}; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ -n "$wheels" ]; then
  site=$(mktemp -d)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$PY" -m clovercode.bench.gpucheck "${args[@]}"

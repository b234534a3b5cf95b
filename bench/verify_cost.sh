#!/usr/bin/env bash
# What a speculative verification step costs on the GPU (issue 39), and why:
# for each model shape, `cellm bench step --verify-drafts 1,2,4,8` at batch 1
# and 512 keys (its k = 0 line is the plain step the ratios are taken to), once with
# the projections of a step of up to 8 rows on cuBLASLt (the default) and
# once on the fused many-row GEMV (CELLM_GEMV_MAX_ROWS=8, the live experiment
# README's knob table lists). JSON lines go to OUT.jsonl, logs beside it.
# (A kernel table of one step is scripts/gpu-profile's job: Nsight Compute
# over a whole `bench step` run replays thousands of kernels and outlasted a
# device call in session 33.)
#
#   bench/verify_cost.sh CELLM OUT.jsonl [SHAPE...]
#
# CELLM: the cellm binary (e.g. build/cuda-release/bin/cellm). SHAPE: model
# shapes or files for `bench step --model` (default: gemma3-270m llama-3.2-1b).
set -euo pipefail
usage="usage: verify_cost.sh CELLM OUT.jsonl [SHAPE...]"
CELLM=${1:?$usage}
OUTJ=${2:?$usage}
shift 2
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(gemma3-270m llama-3.2-1b)
[ -x "$CELLM" ] || { echo "verify_cost.sh: $CELLM is not an executable" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
logs="${OUTJ%.jsonl}"
for shape in "${shapes[@]}"; do
  for rows in 1 8; do
    echo "== $shape, steps of up to $rows rows on the fused GEMV" >&2
    CELLM_GEMV_MAX_ROWS=$rows "$CELLM" bench step --model "$shape" --batch 1 --context 512 \
      --verify-drafts 1,2,4,8 --no-prefill --json "$OUTJ" 2>&1 |
      tee "$logs-$(basename "$shape")-rows$rows.txt" | grep -E "verify|decode" || true
  done
done


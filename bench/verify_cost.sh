#!/usr/bin/env bash
# What a speculative verification step costs on the GPU (issue 39), and why:
# for each model shape, `cellm bench step --verify-drafts 0,1,2,4,8` at batch 1
# and 512 keys (k = 0 is the plain step the ratios are taken to), once with
# the projections of a step of up to 8 rows on cuBLASLt (the default) and
# once on the fused many-row GEMV (CELLM_GEMV_MAX_ROWS=8, the live experiment
# README's knob table lists); then, under Nsight Compute where it is
# installed, the kernels of one plain step and of one k = 4 verification step
# of the first shape (bench/tools/kernel_table.py: microseconds a step by
# kernel). JSON lines go to OUT.jsonl, tables and logs beside it.
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
      --verify-drafts 0,1,2,4,8 --no-prefill --json "$OUTJ" 2>&1 |
      tee "$logs-$(basename "$shape")-rows$rows.txt" | grep -E "verify|decode" || true
  done
done

ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$ncu" ] || { echo "verify_cost.sh: no ncu: kernel tables skipped" >&2; exit 0; }
shape=${shapes[0]}
for k in 0 4; do
  tag="$(basename "$shape")-k$k"
  "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    "$CELLM" bench step --model "$shape" --batch 1 --context 512 --verify-drafts "$k" \
    --no-prefill --warmup 2 --steps 3 > "$logs-ncu-$tag.csv" 2> "$logs-ncu-$tag.err" || {
    echo "verify_cost.sh: ncu failed for $tag (see $logs-ncu-$tag.err)" >&2; continue; }
  python3 "$HERE/tools/kernel_table.py" "$logs-ncu-$tag.csv" "$tag" | tee "$logs-kernels-$tag.md"
done

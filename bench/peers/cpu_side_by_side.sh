#!/usr/bin/env bash
# cellm's fast CPU program beside llama.cpp's llama-bench on the same GGUF
# file and thread count, alternating so both see the same machine load:
# llama-bench tg64/pp128, then `cellm bench step --backend cpu` (decode of 64
# tokens from a one-token context, a 128-token prefill), ROUNDS times.
# Appends every figure as a JSON line to OUT.jsonl, with the load average.
#
#   bench/peers/cpu_side_by_side.sh MODEL.gguf THREADS OUT.jsonl [ROUNDS]
#
# Needs build/cpu-release/bin/cellm and llama-bench (llama_bench_cpu.sh builds it).
set -euo pipefail
MODEL=${1:?usage: cpu_side_by_side.sh MODEL.gguf THREADS OUT.jsonl [ROUNDS]}
THREADS=${2:?threads}
OUTJ=${3:?output jsonl}
ROUNDS=${4:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CELLM=${CELLM_BIN:-$ROOT/build/cpu-release/bin/cellm}
[ -x "$CELLM" ] || { echo "cpu_side_by_side.sh: no $CELLM (cmake --build --preset cpu-release --target cellm)" >&2; exit 2; }
export CELLM_COMMIT=${CELLM_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD)}
for r in $(seq 1 "$ROUNDS"); do
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "{\"bench\": \"note\", \"round\": $r, \"loadavg_before\": \"$load\", \"time\": \"$(date -u +%FT%TZ)\"}" >> "$OUTJ"
  REPS=${REPS:-3} "$HERE/llama_bench_cpu.sh" "$MODEL" "$THREADS" "$OUTJ"
  "$CELLM" bench step --backend cpu --model "$MODEL" --threads "$THREADS" --steps 64 --warmup 2 \
    --prompt 128 --json "$OUTJ"
done

#!/usr/bin/env bash
# The open targets' measurements in one place, on the GPU machine: each
# section runs the benchmarks a target is judged by, the way users reach them
# (`cellm bench serve --http` starts `cellm serve`'s engine; `cellm bench
# step` drives the Runner), appends their JSON lines to OUT/targets.jsonl and
# prints what each target asked for beside what this run measured. Targets
# are stated for an H200; on an H100 read a serving target at 0.95 of it and
# a decode target at the roofline fraction the run reports.
#
#   bench/targets.sh CELLM OUT SECTION...
#
# CELLM: the cellm binary (build/cuda-release/bin/cellm, e.g. unpacked by
# `source scripts/gpu-prebuilt unpack`). OUT: a folder for logs and JSON.
# Sections (each bounded by its own timeouts; a section missing a model says
# so and goes on):
#   serve   8B over HTTP, 1000 x 512 in / 256 out at concurrency 256, with
#           the in-process figure of the same run (tok/s, HTTP/in-process,
#           ITL p99 / p50); 1B decode at batch 1 and 512 keys.
#   kv      FP8 against bf16 K/V: 8B decode at batches 64 and 256, 2048 keys.
#   quant   random-weight GGUFs (bench/peers/random_gguf.py: needs the gguf
#           wheel, scripts/gpu-prebuilt installs the carried one) of the 1B
#           and 8B shapes in Q4_K_M kept in blocks: decode at batch 1 and 512
#           keys; 8B with --quantize fp8: decode at batch 1, prefill of 512.
#   fp8serve  8B with --quantize fp8 served over HTTP: 1000 x 512 in / 256 out
#           at concurrency 256, and TensorRT-LLM's published shape (1000 in /
#           1000 out); both again with --kv-dtype fp8.
#   spec    a verification step's cost (bench/verify_cost.sh, 1B and 8B) and
#           text editing at batch 1 on models/gemma-3-270m-q4_k_m.gguf
#           (bench/speculation_text_edit.sh).
#   real    the real models in models/ (scripts/gpu-model brings them):
#           perplexity on the GPU, bf16 and kept in blocks, over
#           tests/app/data/perplexity.txt, and greedy agreement of 64 tokens
#           between the CPU and the GPU.
# Environment: ROUNDS (spec's text-editing rounds, default 2).
set -uo pipefail
usage="usage: bench/targets.sh CELLM OUT SECTION... (serve kv quant fp8serve spec real)"
CELLM=${1:?$usage}
OUTD=${2:?$usage}
shift 2
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
[ -x "$CELLM" ] || { echo "targets.sh: $CELLM is not an executable" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUTD"
J=$OUTD/targets.jsonl
# The venv `source scripts/gpu-prebuilt unpack` makes holds the carried gguf wheel.
PY=python3
[ -x "$ROOT/.venv/bin/python" ] && PY=$ROOT/.venv/bin/python
export CELLM_COMMIT=${CELLM_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}

# step NAME SECONDS COMMAND...: runs it with a timeout, its output in OUT/NAME.log.
step() {
  local name=$1 secs=$2
  shift 2
  timeout "$secs" "$@" > "$OUTD/$name.log" 2>&1
  local rc=$?
  echo "targets: $name rc=$rc $(date +%T)"
  [ $rc -eq 0 ] || tail -n 5 "$OUTD/$name.log"
  return $rc
}

section_serve() {
  step serve-8b 420 "$CELLM" bench serve --http --model llama-3.1-8b --requests 1000 \
    --input-len 512 --output-len 256 --max-concurrency 256 --progress 0 --json "$J"
  step decode-1b 90 "$CELLM" bench step --model llama-3.2-1b --batch 1 --context 512 \
    --no-prefill --sampling greedy --json "$J"
}

section_kv() {
  for kv in bf16 fp8; do
    step "kv-$kv" 120 "$CELLM" bench step --model llama-3.1-8b --batch 64,256 --context 2048 \
      --no-prefill --sampling greedy --kv-dtype "$kv" --json "$J"
  done
}

section_quant() {
  local dir=$ROOT/build/targets-gguf
  mkdir -p "$dir"
  for s in llama-3.2-1b llama-3.1-8b; do
    local f=$dir/$s.Q4_K_M.gguf
    [ -f "$f" ] || step "gguf-$s" 300 "$PY" "$ROOT/bench/peers/random_gguf.py" "$s" Q4_K_M "$f" ||
      continue
    step "q4km-$s" 120 "$CELLM" bench step --model "$f" --keep-quantized --batch 1 \
      --context 512 --prompt 512 --sampling greedy --json "$J"
  done
  step fp8-8b 150 "$CELLM" bench step --model llama-3.1-8b --quantize fp8 --batch 1 \
    --context 512 --prompt 512 --sampling greedy --json "$J"
}

section_fp8serve() {
  for kv in bf16 fp8; do
    step "fp8serve-512-$kv" 420 "$CELLM" bench serve --http --model llama-3.1-8b --quantize fp8 \
      --kv-dtype "$kv" --requests 1000 --input-len 512 --output-len 256 --max-concurrency 256 \
      --progress 0 --json "$J"
    step "fp8serve-1000-$kv" 560 "$CELLM" bench serve --http --model llama-3.1-8b --quantize fp8 \
      --kv-dtype "$kv" --requests 1000 --input-len 1000 --output-len 1000 \
      --max-concurrency 256 --progress 0 --json "$J"
  done
}

section_spec() {
  step verify 400 "$ROOT/bench/verify_cost.sh" "$CELLM" "$J" llama-3.2-1b llama-3.1-8b
  local g=$ROOT/models/gemma-3-270m-q4_k_m.gguf
  if [ -f "$g" ]; then
    ROUNDS=${ROUNDS:-2} step text-edit 300 "$ROOT/bench/speculation_text_edit.sh" "$g" "$CELLM" "$J"
    grep -E '^\|' "$OUTD/text-edit.log" | tail -n 8
  else
    echo "targets: no $g (scripts/gpu-model): text editing not run"
  fi
}

section_real() {
  # A continuation (the Gemma GGUF has no chat template; SmolLM2 ends a bare
  # instruction at once), so that both programs write their 64 tokens.
  local prompt="Once upon a time, in a small village by the sea,"
  for m in gemma-3-270m-q4_k_m.gguf SmolLM2-135M-Instruct.Q4_1.gguf; do
    local f=$ROOT/models/$m
    [ -f "$f" ] || { echo "targets: no $f (scripts/gpu-model)"; continue; }
    for mode in bf16 kept; do
      local extra=()
      [ $mode = kept ] && extra=(--keep-quantized)
      step "ppl-$m-$mode" 120 "$CELLM" perplexity "$f" --backend cuda ${extra[@]+"${extra[@]}"} \
        --file "$ROOT/tests/app/data/perplexity.txt" --context 256 --json "$J"
      tail -n 1 "$OUTD/ppl-$m-$mode.log"
    done
    local failed=()
    for be in cpu cuda cuda-kept; do
      local args=(--backend "${be%-kept}")
      [ $be = cuda-kept ] && args+=(--keep-quantized)
      timeout 120 "$CELLM" run "$f" "${args[@]}" -n 64 --temperature 0 -p "$prompt" \
        > "$OUTD/agree-$m-$be.txt" 2> "$OUTD/agree-$m-$be.err" || failed+=("$be")
    done
    for be in cuda cuda-kept; do
      if [[ " ${failed[*]} " == *" cpu "* || " ${failed[*]} " == *" $be "* ]]; then
        echo "targets: $m: a run failed (cpu or $be; see agree-$m-*.err)"
      elif cmp -s "$OUTD/agree-$m-cpu.txt" "$OUTD/agree-$m-$be.txt"; then
        echo "targets: $m: 64 greedy tokens on $be equal the CPU's"
      else
        echo "targets: $m: $be differs from the CPU (files agree-$m-*.txt)"
      fi
    done
  done
}

for s in "$@"; do
  case $s in
    serve | kv | quant | fp8serve | spec | real) echo "== $s"; "section_$s" ;;
    *) echo "targets.sh: unknown section '$s' ($usage)" >&2; exit 2 ;;
  esac
done

if [ -s "$J" ]; then
  "$PY" "$ROOT/bench/tools/targets_table.py" "$J"
else
  echo "targets: no JSON lines were written (every measurement failed; logs in $OUTD)"
fi

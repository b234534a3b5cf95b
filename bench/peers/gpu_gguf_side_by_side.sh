#!/usr/bin/env bash
# cellm beside llama.cpp on the same quantized GGUF files, on the GPU machine,
# in one device call (about 8 minutes cold, a few minutes warm):
#   1. in parallel: builds llama.cpp's llama-bench with CUDA (sm_90) from the
#      carried pack, builds `cellm` (cuda-release), and writes random-weight
#      GGUFs in the Llama-3.2-1B / Llama-3.1-8B shapes (random_gguf.py);
#   2. per file: llama-bench (-p 512 -n 128 -ngl 99, flash attention off and
#      on, one sequence), then `cellm bench step` (batch 1, a 512-token
#      prefill, 128 decode steps);
#   3. one JSON line per measurement in $OUT/gguf_side_by_side.jsonl (fields:
#      bench/peers/side_by_side_jsonl.py), a table on stdout, and the time of
#      every phase in $OUT/phases.txt.
#
# Prepare here (bench/peers/README.md): bench/peers/pack_llama_cpp.sh writes
# .peers/llama.cpp.tar.gz; scripts/gpu-deps fills .deps (the -dev packages
# cellm's build needs there, and the gguf wheel). Then run with
#   carry: [".peers", ".deps"]   command: bench/peers/gpu_gguf_side_by_side.sh
#
# Environment: SHAPES (default "llama-3.2-1b llama-3.1-8b"), MIXES (default
# "Q4_K_M Q8_0"), REPS (llama-bench -r, default 3), JOBS (default nproc),
# OUT (default build/peers/out), PEERS_CELLM_BIN (use this cellm, build nothing;
# not a CELLM_* name: cellm refuses CELLM_* variables it does not know),
# BENCH_TIMEOUT (seconds per tool and file, default 240), PP / TG (prompt and
# generated tokens, default 512 / 128; smaller for a trial run), STOP_AFTER_BUILD=1
# (phase 1 only: a cold machine's builds in one call, the measurements in the next),
# BUDGET_S (default 480: no new measurement starts after this many seconds, so
# that a call under the device's 600 s limit still writes its lines and table;
# the skipped ones are named, and a second call on the warm machine, which
# skips phase 1, measures them all).
# Builds and GGUFs stay in build/peers/ (ignored, kept by a warm machine), so
# a second call skips what is already there and current.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
WORK=$ROOT/build/peers
OUT=${OUT:-$WORK/out}
SHAPES=${SHAPES:-llama-3.2-1b llama-3.1-8b}
MIXES=${MIXES:-Q4_K_M Q8_0}
REPS=${REPS:-3}
PP=${PP:-512}
TG=${TG:-128}
JOBS=${JOBS:-$(nproc)}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-240}
BUDGET_S=${BUDGET_S:-480}
PACK=$ROOT/.peers/llama.cpp.tar.gz
GGUF_DIR=$WORK/gguf
LCB=$WORK/llama-build
RESULTS=$OUT/gguf_side_by_side.jsonl
mkdir -p "$OUT" "$GGUF_DIR"
: > "$RESULTS"  # this call's lines only (the raw files are rewritten too)
: > "$OUT/phases.txt"
T0=$(date +%s)
phase() { echo "== $(date -u +%T) +$(($(date +%s) - T0))s $*" | tee -a "$OUT/phases.txt"; }
die() { echo "gpu_gguf_side_by_side.sh: $*" | tee -a "$OUT/phases.txt" >&2; exit 2; }

# ---- preflight: everything missing is named before an expensive step
[ -f "$PACK" ] || die "no $PACK: run bench/peers/pack_llama_cpp.sh here and carry .peers"
command -v nvidia-smi >/dev/null || die "no nvidia-smi: this is for the GPU machine"
python3 -c 'import numpy' 2>/dev/null || die "python3 has no numpy (random_gguf.py needs it)"
python3 bench/peers/random_gguf.py --help >/dev/null ||
  die "random_gguf.py cannot import gguf: carry .deps (scripts/gpu-deps) or .whl with its wheel"
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
LC_SOURCE=$(tar -xzOf "$PACK" llama.cpp/PACK_INFO | head -n 1)  # e.g. llama-cpp-python 0.3.36 sdist
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/card.txt"
phase "start: $CARD, $JOBS cores, shapes [$SHAPES], mixes [$MIXES]"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH="/usr/local/cuda/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

build_llama() {
  local stamp
  stamp=$(sha256sum "$PACK" | cut -c1-16)
  if [ -x "$LCB/bin/llama-bench" ] && [ "$(cat "$LCB/.pack" 2>/dev/null)" = "$stamp" ]; then
    echo "llama-bench is built from this pack ($stamp)"
    return 0
  fi
  rm -rf "$WORK/llama.cpp" "$LCB"
  # A llama-bench prebuilt from this pack (prebuild_llama_bench.sh) saves the build.
  if [ -f "$ROOT/.peers/llama-bench.xz" ] &&
    [ "$(cat "$ROOT/.peers/llama-bench.stamp" 2>/dev/null)" = "$stamp" ]; then
    mkdir -p "$LCB/bin" && xz -dc "$ROOT/.peers/llama-bench.xz" > "$LCB/bin/llama-bench" &&
      chmod +x "$LCB/bin/llama-bench" && echo "$stamp" > "$LCB/.pack" &&
      echo "llama-bench prebuilt from this pack ($stamp)" && return 0
  fi
  tar -xzf "$PACK" -C "$WORK" || return 1
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$WORK/llama.cpp" -B "$LCB" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON &&
    cmake --build "$LCB" -j "$JOBS" --target llama-bench &&
    echo "$stamp" > "$LCB/.pack"
}

build_cellm() {
  if [ -n "${PEERS_CELLM_BIN:-}" ]; then
    echo "using PEERS_CELLM_BIN=$PEERS_CELLM_BIN"
    return 0
  fi
  # shellcheck source=scripts/gpu-env
  source scripts/gpu-env
  if [ ! -f build/cuda-release/CMakeCache.txt ]; then
    cmake --preset cuda-release -DCELLM_SERVER=OFF || return 1
  fi
  cmake --build --preset cuda-release -j "$JOBS" --target cellm
}

gen_ggufs() {
  local gen_sha s m f want need avail
  gen_sha=$(sha256sum bench/peers/random_gguf.py | cut -c1-16)
  for s in $SHAPES; do
    for m in $MIXES; do
      f=$GGUF_DIR/$s.$m.gguf
      want="$gen_sha $s $m"
      if [ -f "$f" ] && [ "$(cat "$f.stamp" 2>/dev/null)" = "$want" ]; then
        echo "$f is current"
        continue
      fi
      rm -f "$f" "$f.stamp"
      need=$(($(python3 bench/peers/random_gguf.py "$s" "$m" --bytes) / 1048576 + 1024))
      avail=$(df -Pm "$GGUF_DIR" | awk 'NR == 2 {print $4}')
      if [ "$avail" -lt "$need" ]; then
        echo "not enough disk for $f: $avail MiB free, $need MiB needed"
        return 1
      fi
      python3 bench/peers/random_gguf.py "$s" "$m" "$f.tmp" && mv "$f.tmp" "$f" &&
        echo "$want" > "$f.stamp" || return 1
    done
  done
}

# ---- phase 1: the two builds and the files, side by side
phase "builds and GGUF files (logs: llama-build.log, cellm-build.log, gen.log)"
(build_llama > "$OUT/llama-build.log" 2>&1; echo $? > "$OUT/.rc-llama") &
pid_llama=$!
(build_cellm > "$OUT/cellm-build.log" 2>&1; echo $? > "$OUT/.rc-cellm") &
pid_cellm=$!
gen_ggufs > "$OUT/gen.log" 2>&1
rc_gen=$?
phase "GGUF files done (rc $rc_gen): $(grep -c '^wrote' "$OUT/gen.log") written"
wait $pid_llama $pid_cellm
rc_llama=$(cat "$OUT/.rc-llama")
rc_cellm=$(cat "$OUT/.rc-cellm")
phase "builds done: llama.cpp rc $rc_llama, cellm rc $rc_cellm"
[ "$rc_gen" = 0 ] || { tail -n 20 "$OUT/gen.log"; die "writing the GGUF files failed"; }
cat "$OUT/gen.log"
LB=$LCB/bin/llama-bench
CELLM=${PEERS_CELLM_BIN:-$ROOT/build/cuda-release/bin/cellm}
if [ "$rc_llama" != 0 ] || [ ! -x "$LB" ]; then
  tail -n 30 "$OUT/llama-build.log"
  echo "llama.cpp build failed: cellm only"
  LB=""
fi
if [ "$rc_cellm" != 0 ] || [ ! -x "$CELLM" ]; then
  tail -n 30 "$OUT/cellm-build.log"
  echo "cellm build failed: llama.cpp only"
  CELLM=""
fi
[ -n "$LB$CELLM" ] || die "neither tool built"
# shellcheck source=scripts/gpu-env
source scripts/gpu-env  # CELLM_COMMIT from .snap.commit
CELLM_COMMIT=${CELLM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export CELLM_COMMIT
if [ "${STOP_AFTER_BUILD:-0}" = 1 ]; then
  phase "STOP_AFTER_BUILD=1: builds and files are ready in $WORK"
  exit 0
fi

# ---- phase 2: the measurements, one tool at a time on the GPU
in_budget() {
  if [ $(($(date +%s) - T0)) -gt "$BUDGET_S" ]; then
    phase "SKIPPED $1: past BUDGET_S=$BUDGET_S s (call again: the builds and files are kept)"
    return 1
  fi
}
for s in $SHAPES; do
  for m in $MIXES; do
    f=$GGUF_DIR/$s.$m.gguf
    meta=(--card "$CARD" --file "$f" --shape "$s" --mix "$m")
    if [ -n "$LB" ] && in_budget "llama-bench $s $m"; then
      phase "llama-bench $s $m"
      raw=$OUT/raw-llama-bench.$s.$m.jsonl
      timeout "$BENCH_TIMEOUT" "$LB" -m "$f" -ngl 99 -fa 0,1 -p "$PP" -n "$TG" -r "$REPS" -o jsonl \
        > "$raw" 2>> "$OUT/llama-bench.err" || echo "llama-bench $s $m: rc $?" | tee -a "$OUT/phases.txt"
      python3 bench/peers/side_by_side_jsonl.py llama.cpp "$raw" "${meta[@]}" \
        --tool-build "$LC_SOURCE" >> "$RESULTS"
    fi
    if [ -n "$CELLM" ] && in_budget "cellm $s $m"; then
      phase "cellm bench step $s $m"
      raw=$OUT/raw-cellm.$s.$m.jsonl
      rm -f "$raw"
      # cellm keeps the file's blocks on the GPU (--keep-quantized) unless
      # PEERS_CELLM_WEIGHTS=bf16 asks for the bf16 conversion at load.
      weights_args=()
      [ "${PEERS_CELLM_WEIGHTS:-blocks}" = blocks ] && weights_args=(--keep-quantized)
      timeout "$BENCH_TIMEOUT" "$CELLM" bench step --model "$f" "${weights_args[@]}" --batch 1 \
        --context 2 --steps "$TG" --warmup 8 --sampling greedy --prompt "$PP" --json "$raw" \
        >> "$OUT/cellm-bench.log" 2>&1 ||
        echo "cellm $s $m: rc $?" | tee -a "$OUT/phases.txt"
      [ -f "$raw" ] && python3 bench/peers/side_by_side_jsonl.py cellm "$raw" "${meta[@]}" --tg "$TG" >> "$RESULTS"
    fi
  done
done
phase "done"

# ---- a table of what was measured
python3 - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"\n{rows[0]['card'] if rows else ''}: tokens/s (llama.cpp: flash attention off / on)")
print(f"| {'file':28s} | {'test':6s} | {'llama.cpp fa off':>16s} | {'llama.cpp fa on':>15s} | {'cellm':>9s} |")
print("|" + "|".join("-" * w for w in (30, 8, 18, 17, 11)) + "|")
keys = sorted({(r["file"], r["test"]) for r in rows})
for file, test in keys:
    def get(tool, fa):
        v = [r["tokens_per_s"] for r in rows
             if (r["file"], r["test"], r["tool"], r["flash_attn"]) == (file, test, tool, fa)]
        return f"{v[-1]:.1f}" if v and v[-1] is not None else "-"
    print(f"| {file:28s} | {test:6s} | {get('llama.cpp', 'off'):>16s} | "
          f"{get('llama.cpp', 'on'):>15s} | {get('cellm', None):>9s} |")
EOF

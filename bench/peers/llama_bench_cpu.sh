#!/usr/bin/env bash
# Builds llama.cpp's llama-bench for the CPU from the llama-cpp-python source
# distribution and runs tg64 / pp128 on a GGUF file with a given thread count,
# so cellm's CPU figures (`cellm bench step --backend cpu`) can be set beside
# llama.cpp's on the same file, threads and machine.
#
#   bench/peers/llama_bench_cpu.sh MODEL.gguf [THREADS] [OUT.jsonl]
#
# Environment: LCPP_VERSION (default 0.3.36, the tree the GPU recipe used),
# PEERS_WORK (build folder, default ~/.cache/cellm-peers), JOBS (default 2),
# REPS (llama-bench -r, default 3).
# The build (about 20 minutes on 2 cores) is reused when llama-bench exists.
set -euo pipefail
MODEL=${1:?usage: llama_bench_cpu.sh MODEL.gguf [THREADS] [OUT.jsonl]}
THREADS=${2:-$(nproc)}
OUTJ=${3:-}
VERSION=${LCPP_VERSION:-0.3.36}
WORK=${PEERS_WORK:-$HOME/.cache/cellm-peers}
JOBS=${JOBS:-2}
REPS=${REPS:-3}
[ -f "$MODEL" ] || { echo "llama_bench_cpu.sh: no model file '$MODEL'" >&2; exit 2; }
for tool in cmake python3 c++; do
  command -v $tool >/dev/null || { echo "llama_bench_cpu.sh: '$tool' is missing (run scripts/setup)" >&2; exit 2; }
done
mkdir -p "$WORK"
SRC="$WORK/llama-cpp-python-$VERSION"
BIN="$SRC/build-cpu/bin/llama-bench"
if [ ! -x "$BIN" ]; then
  if [ ! -d "$SRC" ]; then
    python3 -m pip download --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$WORK" >&2
    tar -xzf "$WORK/llama_cpp_python-$VERSION.tar.gz" -C "$WORK"
    mv "$WORK/llama_cpp_python-$VERSION" "$SRC"
  fi
  LC="$SRC/vendor/llama.cpp"
  GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
  # Native CPU build (the same SIMD cellm detects at run time), nothing else.
  cmake -S "$LC" -B "$SRC/build-cpu" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON >&2
  cmake --build "$SRC/build-cpu" -j "$JOBS" --target llama-bench >&2
fi
# One JSON object per test (tg64, pp128) on stdout and appended to OUT.jsonl.
RAW=$("$BIN" -m "$MODEL" -t "$THREADS" -p 128 -n 64 -r "$REPS" -o jsonl)
echo "$RAW" | python3 -c '
import json, sys, datetime
out = sys.argv[1]
for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    r = json.loads(line)
    test = ("pp%d" % r["n_prompt"]) if r.get("n_prompt") else ("tg%d" % r["n_gen"])
    rec = {"bench": "peer", "peer": "llama.cpp llama-bench", "build": r.get("build_commit"),
           "model": r.get("model_filename"), "model_type": r.get("model_type"),
           "threads": r.get("n_threads"), "test": test, "tokens_per_s": r.get("avg_ts"),
           "stddev_tokens_per_s": r.get("stddev_ts"), "reps": len(r.get("samples_ts") or []),
           "cpu": r.get("cpu_info"), "time": datetime.datetime.utcnow().isoformat() + "Z"}
    print(json.dumps(rec))
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")
' "$OUTJ"
